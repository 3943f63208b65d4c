"""A JSON state file replaced atomically: a crash leaves the old or the new file, never half.

The file is written to a temporary name, fsynced, renamed over the old one, and the folder is
fsynced so the rename itself survives a power cut. A file that cannot be read back is moved
aside (never deleted) and the caller rebuilds the state from the runtime.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

STATE_FILE = "state.json"
FORMAT_VERSION = 1


class StateError(ValueError):
    pass


class StateStore:
    def __init__(self, state_dir: str | Path) -> None:
        self.dir = Path(state_dir)
        self.path = self.dir / STATE_FILE

    def ensure_dir(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self.dir, 0o700)

    def load(self, *, move_aside: bool = True) -> dict[str, Any] | None:
        """The saved state; None when there is none or it is corrupt. A corrupt file is moved
        aside (the enforcer then rebuilds from the runtime); read-only callers such as
        `status` pass move_aside=False and get a StateError instead."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            data = json.loads(raw)
            if not isinstance(data, dict) or data.get("version") != FORMAT_VERSION:
                raise ValueError(f"not a version {FORMAT_VERSION} state object")
        except ValueError as exc:
            if not move_aside:
                raise StateError(f"{self.path}: {exc}") from None
            self.move_aside(str(exc))
            return None
        return data

    def move_aside(self, reason: str) -> None:
        """Keeps a state file that cannot be used, for the operator to look at."""
        aside = self.path.with_name(f"{STATE_FILE}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}")
        os.replace(self.path, aside)
        log.error(
            "state file %s is corrupt (%s); moved it to %s and rebuilding the state from "
            "the runtime",
            self.path,
            reason,
            aside,
        )

    def save(self, data: dict[str, Any], *, durable: bool = True) -> None:
        """Replaces the state file. `durable` fsyncs file and folder: used where a crash must
        not lose the write (a CPU handed out); other writes can be re-derived from the runtime."""
        payload = json.dumps({**data, "version": FORMAT_VERSION}, separators=(",", ":"))
        tmp = self.path.with_name(f".{STATE_FILE}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, payload.encode())
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        if durable:
            dir_fd = os.open(self.dir, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
