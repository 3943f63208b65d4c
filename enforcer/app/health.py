"""The health file the DaemonSet's probes read: "serving", "standby" or (NRI)
"not-synchronized", kept fresh."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from resource_files.safe_files import private_dir, write_file

HEALTH_SECONDS = 5.0
SERVING = "serving"
STANDBY = "standby"
# NRI: registered, but the runtime has not synchronized the plugin, so it sends no event (or
# not even registered): the DaemonSet's liveness probe fails on this word.
NOT_SYNCHRONIZED = "not-synchronized"


class HealthFile:
    """Rewritten every few seconds: "serving" while `in_charge()`, else "standby"; removed at
    exit. Its age says the process is alive, its word whether it is the node's enforcer."""

    def __init__(self, path: str | None) -> None:
        self.path = Path(path) if path else None

    def write(self, word: str) -> None:
        if self.path is not None:
            # Made 0700 when missing (an existing folder, such as /run, is left as it is); the
            # file through an O_EXCL|O_NOFOLLOW temporary file: a planted link is refused.
            private_dir(self.path.parent, fix_mode=False)
            write_file(self.path, (word + "\n").encode(), mode=0o644, durable=False)

    async def keep(self, in_charge: Callable[[], bool]) -> None:
        await self.keep_saying(lambda: SERVING if in_charge() else STANDBY)

    async def keep_saying(self, word: Callable[[], str]) -> None:
        """Rewritten every few seconds with what `word()` says then."""
        if self.path is None:
            return
        while True:
            self.write(word())
            await asyncio.sleep(HEALTH_SECONDS)

    def remove(self) -> None:
        if self.path is not None:
            self.path.unlink(missing_ok=True)
