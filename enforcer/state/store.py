"""A JSON state file replaced atomically: a crash leaves the old or the new file, never half.

The file is written to a temporary name, fsynced, renamed over the old one, and the folder is
fsynced so the rename itself survives a power cut. A file that cannot be used is moved aside
(never deleted) and the caller rebuilds the state from the runtime.

A write can also be made durable later (`save(..., sync_later=True)`, then `sync()`): the new
file replaces the old one at once (what a restarted process reads, since a process that dies
leaves the kernel's page cache behind), and `sync()` fsyncs it and the folder, so a power cut
after it loses nothing. The CRI relay overlaps that `sync()` with the runtime's own creation
of the container (docs/architecture.md, "State and crash safety").

A state that cannot be saved (the folder is read-only, full, not ours) or cannot be read (the
file is a folder, unreadable) is not fatal: the store says why in `problem`, each change of it
is logged once, and a write that fails raises `StateWriteError` for the caller to refuse what
it was deciding. A state file that cannot be read is never written over.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from resource_contract.safe_files import (
    create_exclusive,
    private_dir,
    read_file,
    sync_dir,
    write_file,
)

log = logging.getLogger(__name__)

STATE_FILE = "state.json"
PROBE_FILE = ".write-probe"
FORMAT_VERSION = 1


class StateError(ValueError):
    """A state file that cannot be used, as a read-only caller (`status`) is told."""


class StateWriteError(OSError):
    """The state could not be saved: `strerror` says why in words ("Read-only file system
    (EROFS)"); the store's `problem` names the folder too."""


def os_error(exc: OSError) -> str:
    """An OSError in words an operator can search for: "Read-only file system (EROFS)"."""
    name = errno.errorcode.get(exc.errno or 0)
    text = exc.strerror or str(exc)
    return f"{text} ({name})" if name else text


class StateStore:
    def __init__(self, state_dir: str | Path) -> None:
        self.dir = Path(state_dir)
        self.path = self.dir / STATE_FILE
        # Why the folder cannot be written now (None: the last write, or probe, worked).
        self.write_problem: str | None = None
        # Why the saved state cannot be read now (None: it was read, or there is none).
        self.read_problem: str | None = None
        # The file in place was written without fsync and `sync()` has not made it durable yet.
        self.unsynced = False

    @property
    def problem(self) -> str | None:
        """Why the state cannot be saved now; None when it can."""
        return self.read_problem or self.write_problem

    # -- the folder ----------------------------------------------------------------------------

    def ensure_dir(self) -> None:
        """Makes the folder (mode 0700) and checks that it takes writes. A folder that cannot
        be made or written is recorded in `problem`, not raised: the relay serves all the same."""
        try:
            private_dir(self.dir)  # 0700; a planted link is refused
            self.probe()
        except OSError as exc:
            self.cannot_write(os_error(exc))

    def probe(self) -> None:
        """Writes, syncs and removes a small file in the folder; OSError when it cannot."""
        probe = self.dir / PROBE_FILE
        fd = create_exclusive(probe, 0o600)
        try:
            os.write(fd, b"probe\n")
            os.fsync(fd)
        finally:
            os.close(fd)
            probe.unlink(missing_ok=True)

    def cannot_write(self, why: str, code: int | None = None) -> StateWriteError:
        """Records (and logs, when it is news) why the folder cannot be written now; returns
        the error for the caller to raise."""
        problem = f"the state folder {self.dir} cannot be written: {why}"
        if problem != self.write_problem:
            log.error(
                "%s; new containers and resizes are refused (UNAVAILABLE) until it can be "
                "written again; retried every few seconds",
                problem,
            )
        self.write_problem = problem
        return StateWriteError(code, why)

    def _written(self) -> None:
        if self.write_problem is not None:
            log.warning("the state folder %s can be written again; deciding again", self.dir)
            self.write_problem = None

    # -- reading -------------------------------------------------------------------------------

    def load(self, *, move_aside: bool = True) -> dict[str, Any] | None:
        """The saved state; None when there is none, it is corrupt or it cannot be read.

        A corrupt file is moved aside (the enforcer then rebuilds from the runtime); one that
        cannot be read is left alone and recorded in `read_problem`. Read-only callers such
        as `status` pass move_aside=False and get a StateError instead, in one line."""
        try:
            raw = read_file(self.path)  # a link planted there is not followed
        except FileNotFoundError:
            self._read()
            return None
        except OSError as exc:
            problem = f"the state file {self.path} cannot be read: {os_error(exc)}"
            if not move_aside:
                raise StateError(problem) from None
            if problem != self.read_problem:
                log.error(
                    "%s; it is left as it is, never written over, and new containers and "
                    "resizes are refused (UNAVAILABLE) until it can be read; retried every "
                    "few seconds",
                    problem,
                )
            self.read_problem = problem
            return None
        self._read()
        try:
            data = parse_state(raw)
        except StateError as exc:
            if not move_aside:
                raise StateError(f"{self.path}: {exc}") from None
            self.move_aside(str(exc), "all of it")
            return None
        return data

    def _read(self) -> None:
        if self.read_problem is not None:
            log.warning("the state file %s can be read again", self.path)
            self.read_problem = None

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
            where = f"could not move it aside ({os_error(exc)})"
        if lost == "all of it":
            rest = "rebuilding the state from the runtime"
        elif lost == "nothing":
            rest = "keeping all of its entries"
        else:
            rest = "keeping the rest; running containers it lost are adopted from the runtime"
        log.error(
            "state file %s is corrupt: %s; dropped %s; %s; %s", self.path, damage, lost, where, rest
        )

    # -- writing -------------------------------------------------------------------------------

    def save(self, data: dict[str, Any], *, durable: bool = True, sync_later: bool = False) -> None:
        """Replaces the state file. `durable` fsyncs file and folder: used where a crash must
        not lose the write (a CPU handed out); other writes can be re-derived from the runtime.
        `sync_later` (with `durable`) replaces the file now and leaves the fsyncs to `sync()`,
        which the caller must call before it tells anyone the change was made.

        Raises StateWriteError when it cannot be written (or must not be: a state file that
        could not be read is never replaced)."""
        if self.read_problem is not None:
            raise StateWriteError(None, f"{self.read_problem}; it is not written over")
        payload = json.dumps({**data, "version": FORMAT_VERSION}, separators=(",", ":"))
        now = durable and not sync_later
        try:
            # A temporary file made with O_EXCL|O_NOFOLLOW, mode 0600, renamed over the state
            # file; a link planted at the state file is refused, never written through.
            write_file(self.path, payload.encode(), mode=0o600, durable=now)
        except OSError as exc:
            raise self.cannot_write(os_error(exc), exc.errno) from None
        if now:
            self.unsynced = False
        elif durable:
            self.unsynced = True
        self._written()

    def sync(self) -> None:
        """Makes the state file in place durable (fsync of the file, then of the folder) when
        a `save(..., sync_later=True)` left it unsynced; StateWriteError when it cannot.

        The file in place holds every change written before it, so one sync covers them all,
        whichever write came last."""
        if not self.unsynced:
            return
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            sync_dir(self.dir)
        except OSError as exc:
            raise self.cannot_write(f"fsync failed: {os_error(exc)}", exc.errno) from None
        self.unsynced = False


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
