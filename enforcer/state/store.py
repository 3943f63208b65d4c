"""The enforcer's state on disk: a JSON state file replaced atomically, and a journal of the
changes made since it was written.

The state file is written to a temporary name, fsynced, renamed over the old one, and the
folder is fsynced so the rename itself survives a power cut: a crash leaves the old or the new
file, never half. A file that cannot be used is moved aside (never deleted) and the caller
rebuilds the state from the runtime.

A change that must reach the disk before anyone hears of it, but fast (a container admitted:
CreateContainer waits for it), is appended to the journal `state.journal` instead
(`append`): one short line, written at once, so a restarted process reads it (a process that
dies leaves the kernel's page cache behind), and made durable by `sync()` (fdatasync), which
the CRI relay runs while the runtime creates the container (docs/architecture.md, "State and
crash safety"). Reading the state applies the journal's records newer than the state file
(`enforcer.state.journal`); a record cut off by a crash is not applied. Every durable write
of the state file holds all the records, and empties the journal.

The state file ends with a checksum, a CRC-32 of the rest (`"crc32"`, the last key: see
`enforcer.state.encoding`). A file whose checksum does not match (a damaged block that still
reads as JSON, a hand edit) is corrupt as a whole: nothing in it can be told from a written
value, so it is moved aside and the node's containers are adopted from the runtime. A file of
version 1, written before the checksum, is read without one.

A state that cannot be saved (the folder is read-only, full, not ours) or cannot be read (the
file is a folder, unreadable) is not fatal: the store says why in `problem`, each change of it
is logged once, and a write that fails raises `StateWriteError` for the caller to refuse what
it was deciding. A state file that cannot be read is never written over.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import time
from pathlib import Path
from typing import Any

from enforcer.state import journal
from enforcer.state.encoding import (
    FORMAT_VERSION,
    StateError,
    encode_state,
    parse_state,
)
from resource_files.safe_files import (
    create_exclusive,
    private_dir,
    read_file,
    sync_dir,
    write_file,
)

log = logging.getLogger(__name__)

STATE_FILE = "state.json"
JOURNAL_FILE = "state.journal"
PROBE_FILE = ".write-probe"
# A journal longer than this is folded into the state file at the next lazy write (`flush`).
JOURNAL_FOLD_BYTES = 256 * 1024


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
        self.journal_path = self.dir / JOURNAL_FILE
        # What the last load kept of a corrupt state file: its sections that stand alone and
        # whose own checksums match (SALVAGEABLE); empty otherwise.
        self.salvaged: dict[str, Any] = {}
        # The journal this process appends to: made afresh after its first durable write of
        # the state file (which holds every record an earlier process left).
        self._journal_fd: int | None = None
        self._journal_new = False  # made since the folder was last fsynced
        self.journal_bytes = 0
        self.seq = 0  # the number of the last journal record written or read
        # What `sync()` still has to make durable: the journal, or a state file written
        # with `save(..., sync_later=True)`.
        self._journal_unsynced = False
        self._file_unsynced = False
        self.sync_failed = False  # the last `sync()` failed: the next write is made durable

    @property
    def unsynced(self) -> bool:
        """Changes were written that `sync()` has not made durable yet."""
        return self._journal_unsynced or self._file_unsynced

    @property
    def journal_long(self) -> bool:
        """The journal should be folded into the state file (a durable write)."""
        return self.journal_bytes > JOURNAL_FOLD_BYTES

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
                "written again; tried again at the next creation and every few seconds",
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
        """The saved state, with the journal's newer records applied; None when there is
        none, it is corrupt or it cannot be read.

        A corrupt file is moved aside (the enforcer then rebuilds from the runtime); one that
        cannot be read is left alone and recorded in `read_problem`. Read-only callers such
        as `status` pass move_aside=False and get a StateError instead, in one line."""
        self.salvaged = {}
        # The journal first: should the running enforcer fold it into the state file between
        # the two reads, the newer file holds its records, which are then skipped.
        journal_error: OSError | None = None
        records: list[dict[str, Any]] = []
        try:
            records = self._read_journal(move_aside=move_aside)
        except OSError as exc:  # it counts only when there is a state file
            journal_error = exc
        try:
            raw = read_file(self.path)  # a link planted there is not followed
            if journal_error is not None:
                raise journal_error
        except FileNotFoundError:  # no state file (a journal alone is never applied)
            with contextlib.suppress(OSError):
                self._read_journal(move_aside=False)  # its numbers: later files go past them
            self._read()
            return None
        except OSError as exc:
            name = exc.filename if isinstance(exc.filename, str) else str(self.path)
            what = "journal" if name == str(self.journal_path) else "file"
            problem = f"the state {what} {name} cannot be read: {os_error(exc)}"
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
            self.salvaged = exc.salvaged
            self.move_aside(str(exc), "all of it")
            return None
        covered = data.pop("journal", 0)
        if not isinstance(covered, int) or isinstance(covered, bool):
            covered = 0
        journal.apply(data, records, covered)
        self.seq = max(self.seq, covered)
        return data

    def _read_journal(self, *, move_aside: bool) -> list[dict[str, Any]]:
        """The journal's sound records (none when there is no journal); OSError when it
        cannot be read. Sets `seq` past every record found, applied or not."""
        try:
            raw = read_file(self.journal_path)
        except FileNotFoundError:
            return []
        except OSError as exc:
            exc.filename = str(self.journal_path)
            raise
        found = journal.decode(raw)
        if found.records:
            self.seq = max(self.seq, found.records[-1]["seq"])
        if found.rest and move_aside:
            log.warning(
                "state journal %s: its last %d bytes are %s (a write cut off by a crash or a "
                "power cut, never acknowledged): not applied",
                self.journal_path,
                found.rest,
                found.why,
            )
        return found.records

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

        The file holds every journal record written so far; a durable write empties the
        journal. Raises StateWriteError when it cannot be written (or must not be: a state
        file that could not be read is never replaced)."""
        if not self._may_write():
            return
        # The version first: far from the checksum, so damage to the file's end spares it.
        payload = encode_state({"version": FORMAT_VERSION, **data, "journal": self.seq})
        now = durable and not sync_later
        try:
            # A temporary file made with O_EXCL|O_NOFOLLOW, mode 0600, renamed over the state
            # file; a link planted at the state file is refused, never written through.
            write_file(self.path, payload, mode=0o600, durable=now)
        except OSError as exc:
            raise self.cannot_write(os_error(exc), exc.errno) from None
        if now:
            self._file_unsynced = False
            self.sync_failed = False
            self._empty_journal()
        elif durable:
            self._file_unsynced = True
        if not self.sync_failed:  # only a durable write answers a failed fsync
            self._written()

    def append(self, record: dict[str, Any]) -> bool:
        """Writes one change as a journal record, at once and without fsync (`sync()` makes
        it durable). False when this process has no journal yet (it has not written the state
        file durably since it started): the caller saves the state file instead.

        Raises StateWriteError when it cannot be written; nothing of it is left then."""
        if not self._may_write():
            return True  # not this process's to write (see OwnedStateStore)
        fd = self._journal_fd
        if fd is None:
            return False
        line = journal.encode(record, self.seq + 1)
        if len(line) > journal.MAX_RECORD_BYTES:  # reading would stop at it: write the file
            return False
        try:
            written = os.write(fd, line)
            if written != len(line):  # a full disk: no half record stays behind
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, self.journal_bytes)
            raise self.cannot_write(os_error(exc), exc.errno) from None
        self.seq += 1
        self.journal_bytes += len(line)
        self._journal_unsynced = True
        if not self.sync_failed:
            self._written()
        return True

    def sync(self) -> None:
        """Makes durable what was written without it: the journal (fdatasync, and the folder
        once after the journal was made), or a state file saved with `sync_later` (fsync of
        it and of the folder). StateWriteError when it cannot. One call covers every change
        written before it."""
        if self.sync_failed:
            # Linux reports a write-back error once per open file and marks the pages clean:
            # a later fdatasync on the same file says 0 though the earlier records may never
            # reach the disk. Only a durable write of the whole state file (`save`) answers it.
            raise self.cannot_write(
                "an earlier fsync failed; waiting for a durable write of the state file",
                errno.EIO,
            )
        if not self.unsynced:
            return
        try:
            if self._file_unsynced:
                fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
                sync_dir(self.dir)
                self._file_unsynced = False
                self._empty_journal()  # the file holds every record
            elif self._journal_fd is not None:
                os.fdatasync(self._journal_fd)
                if self._journal_new:
                    sync_dir(self.dir)
                    self._journal_new = False
            self._journal_unsynced = False
        except OSError as exc:
            self.sync_failed = True
            raise self.cannot_write(f"fsync failed: {os_error(exc)}", exc.errno) from None

    def _may_write(self) -> bool:
        """Whether this process writes the state now (True), or leaves it to another (False);
        StateWriteError when it must write and cannot."""
        if self.read_problem is not None:
            raise StateWriteError(None, f"{self.read_problem}; it is not written over")
        return True

    def _empty_journal(self) -> None:
        """After a durable write of the state file: the journal starts again, empty. The
        first time, a fresh file replaces whatever an earlier process left (a planted link
        included); then it is cut back to nothing. A power cut that loses the emptying leaves
        records the state file already holds, which reading skips."""
        self._journal_unsynced = False
        try:
            if self._journal_fd is None:
                tmp = self.journal_path.with_name(f".{JOURNAL_FILE}.tmp")
                fd = create_exclusive(tmp, 0o600)
                try:
                    os.replace(tmp, self.journal_path)
                    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_APPEND)
                except OSError:
                    os.close(fd)
                    with contextlib.suppress(OSError):
                        tmp.unlink()
                    raise
                self._journal_fd = fd
                self._journal_new = True
            elif self.journal_bytes:
                os.ftruncate(self._journal_fd, 0)
            self.journal_bytes = 0
        except OSError as exc:
            # The state file holds everything: changes are saved to it, as a whole, until a
            # later durable write makes a journal again.
            log.warning(
                "state journal %s cannot be made or emptied (%s); writing the state file instead",
                self.journal_path,
                os_error(exc),
            )
            self.close()

    def close(self) -> None:
        """Closes the journal (a stopping process); the files stay as they are."""
        if self._journal_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._journal_fd)
            self._journal_fd = None
