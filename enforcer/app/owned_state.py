"""The state store that writes only while this process holds the state folder's lock."""

from __future__ import annotations

import logging

from enforcer import handover
from enforcer.state import StateStore
from enforcer.state.store import os_error

log = logging.getLogger("enforcer")


class OwnedStateStore(StateStore):
    """Writes only while this process holds the state folder's lock: a newcomer waiting to
    take over, or an enforcer that handed over, never overwrites the owner's state.

    In a folder that cannot be written no lock file can be made either (`lock_failed`): nobody
    can change the state there, so this process goes on as the owner and takes the lock with
    the first write that works."""

    def __init__(self, state_dir: str, lock: handover.StateLock) -> None:
        super().__init__(state_dir)
        self.lock = lock
        self.lock_pending = False

    def lock_failed(self, exc: OSError) -> None:
        self.lock_pending = True
        if self.write_problem is None:  # else already said, by `ensure_dir`
            self.cannot_write(f"no lock file {self.lock.path} can be made: {os_error(exc)}")

    def _may_write(self) -> bool:
        if self.lock.fd is None:
            if not self.lock_pending:
                log.debug("not saving the state: another enforcer owns %s", self.dir)
                return False
            try:
                got = self.lock.try_acquire()
            except OSError as exc:
                raise self.cannot_write(
                    f"no lock file {self.lock.path} can be made: {os_error(exc)}"
                ) from None
            if not got:
                raise self.cannot_write(
                    f"enforcer pid {self.lock.holder()} took its lock meanwhile"
                ) from None
            self.lock_pending = False
            log.info("took the lock of %s", self.dir)
        return super()._may_write()
