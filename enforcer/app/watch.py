"""Reloading the --config file when it changes (polled) or on SIGHUP."""

from __future__ import annotations

import asyncio
import contextlib
import os

from enforcer.app.config_precedence import ConfigManager


class ConfigWatcher:
    """Reloads the configuration file when it changes or on SIGHUP.

    A refused configuration is logged with its reasons and the last good one stays in force.
    """

    POLL_SECONDS = 1.0

    def __init__(self, path: str, manager: ConfigManager, signalled: asyncio.Event) -> None:
        self.path = path
        self.manager = manager
        self.signalled = signalled
        self.seen = self._fingerprint()

    def _fingerprint(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    async def run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.signalled.wait(), self.POLL_SECONDS)
            current = self._fingerprint()
            if not self.signalled.is_set() and current == self.seen:
                continue
            self.signalled.clear()
            self.seen = current
            await self.manager.reload_file()
