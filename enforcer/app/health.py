"""The health file the DaemonSet's probes read: "serving" or "standby", kept fresh."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path

HEALTH_SECONDS = 5.0


class HealthFile:
    """Rewritten every few seconds: "serving" while `in_charge()`, else "standby"; removed at
    exit. Its age says the process is alive, its word whether it is the node's enforcer."""

    def __init__(self, path: str | None) -> None:
        self.path = Path(path) if path else None

    def write(self, word: str) -> None:
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(f".{self.path.name}.tmp")
            tmp.write_text(word + "\n")
            os.replace(tmp, self.path)

    async def keep(self, in_charge: Callable[[], bool]) -> None:
        if self.path is None:
            return
        while True:
            self.write("serving" if in_charge() else "standby")
            await asyncio.sleep(HEALTH_SECONDS)

    def remove(self) -> None:
        if self.path is not None:
            self.path.unlink(missing_ok=True)
