"""A JSON state file replaced atomically: a crash leaves the old or the new file, never half.

The file is written to a temporary name, fsynced, renamed over the old one, and the folder is
fsynced so the rename itself survives a power cut. A file that cannot be used is moved aside
(never deleted) and the caller rebuilds the state from the runtime.
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
    """A state file that cannot be used, as a read-only caller (`status`) is told."""


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
            data = parse_state(raw)
        except StateError as exc:
            if not move_aside:
                raise StateError(f"{self.path}: {exc}") from None
            self.move_aside(str(exc), "all of it")
            return None
        return data

    def move_aside(self, damage: str, lost: str) -> None:
        """Logs a repair of the state file (what was wrong with it, what of it is lost) and
        keeps the damaged file, moved aside, for the operator to look at."""
        aside = self.path.with_name(f"{STATE_FILE}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}")
        n = 1
        while aside.exists():  # never over an earlier one
            aside = aside.with_name(f"{aside.name.split('~')[0]}~{n}")
            n += 1
        try:
            os.replace(self.path, aside)
            where = f"moved it to {aside}"
        except OSError as exc:
            where = f"could not move it aside ({exc.strerror or exc})"
        if lost == "all of it":
            rest = "rebuilding the state from the runtime"
        elif lost == "nothing":
            rest = "keeping all of its entries"
        else:
            rest = "keeping the rest; running containers it lost are adopted from the runtime"
        log.error(
            "state file %s is corrupt: %s; dropped %s; %s; %s", self.path, damage, lost, where, rest
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


def parse_state(raw: bytes) -> dict[str, Any]:
    """The state object in a state file's bytes; StateError saying what is wrong with them."""
    if not raw.strip():
        raise StateError(f"it is empty ({len(raw)} bytes)")
    try:
        data = json.loads(raw)
    except ValueError as exc:  # UnicodeDecodeError included
        raise StateError(f"it is not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise StateError(f"it holds a JSON {_json_type(data)}, not an object")
    version = data.get("version")
    if version != FORMAT_VERSION:
        found = "no version" if version is None else f"version {version!r}"
        raise StateError(f"it has {found}, not version {FORMAT_VERSION}")
    return data


def _json_type(value: object) -> str:
    names = {list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)
