"""The state store that writes only while this process holds the state folder's lock."""

from __future__ import annotations

import logging
from typing import Any

from enforcer import handover
from enforcer.state import StateStore

log = logging.getLogger("enforcer")


class OwnedStateStore(StateStore):
    """Writes only while this process holds the state folder's lock: a newcomer waiting to
    take over, or an enforcer that handed over, never overwrites the owner's state."""

    def __init__(self, state_dir: str, lock: handover.StateLock) -> None:
        super().__init__(state_dir)
        self.lock = lock

    def save(self, data: dict[str, Any], *, durable: bool = True) -> None:
        if self.lock.fd is None:
            log.debug("not saving the state: another enforcer owns %s", self.dir)
            return
        super().save(data, durable=durable)
