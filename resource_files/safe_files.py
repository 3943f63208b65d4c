"""Files both programs write (state, keys, certificates, health): never through a planted link.

`write_file` writes a temporary file created with O_CREAT|O_EXCL|O_NOFOLLOW (a fresh inode,
never an existing file or the target of a symbolic link), with its mode set before any byte is
written, then renames it over the target: a reader sees the old or the new content, never half.
A target that is a symbolic link is refused (`UnsafePath`), as is one that is not a regular
file. `private_dir` makes a folder mode 0700 and refuses one that is a symbolic link.
`read_file` reads with O_NOFOLLOW. Links above the last component (a state folder under a
linked /var) are the operator's and are followed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafePath(OSError):
    """A path that is a symbolic link, or not the kind of file expected: nothing was written."""


def _refuse_link(path: Path, kind: str) -> os.stat_result | None:
    """The path's lstat (None when it does not exist); UnsafePath for a link or a wrong kind."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePath(
            errno.ELOOP, f"{path} is a symbolic link; refusing to write through it", str(path)
        )
    wanted = stat.S_ISDIR if kind == "folder" else stat.S_ISREG
    if not wanted(st.st_mode):
        raise UnsafePath(errno.EEXIST, f"{path} exists and is not a {kind}", str(path))
    return st


def private_dir(path: str | os.PathLike[str], *, mode: int = 0o700, fix_mode: bool = True) -> Path:
    """Makes `path` (and missing parents) with `mode`; refuses a link. An existing folder
    gets `mode` when `fix_mode` (a folder that is the program's own, such as the state folder),
    else is left as it is (an output folder the user named)."""
    folder = Path(path)
    st = _refuse_link(folder, "folder")
    if st is None:
        folder.mkdir(parents=True, exist_ok=True, mode=mode)
        st = _refuse_link(folder, "folder")  # made meanwhile by someone else: checked again
        assert st is not None
        fix_mode = True
    if fix_mode and stat.S_IMODE(st.st_mode) != mode:
        # Through a descriptor opened without following links: never the mode of a link's target.
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW)
        try:
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
    return folder


def create_exclusive(path: str | os.PathLike[str], mode: int) -> int:
    """A new file at `path`, opened for writing: O_CREAT|O_EXCL|O_NOFOLLOW, `mode` exactly.
    A leftover (a file from a crash, or a planted link) is removed first: unlink removes the
    link itself, never its target. Raises FileExistsError when something reappears meanwhile."""
    target = Path(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW
    try:
        fd = os.open(target, flags, mode)
    except FileExistsError:
        target.unlink()
        fd = os.open(target, flags, mode)
    try:
        os.fchmod(fd, mode)  # the umask narrows the mode given to open
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_file(
    path: str | os.PathLike[str], data: bytes, *, mode: int = 0o600, durable: bool = True
) -> None:
    """Replaces `path` with `data` atomically (temporary file, then rename), with `mode`.
    `durable` fsyncs the file and its folder. UnsafePath when `path` is a link or not a
    regular file; OSError for any other failure, with no temporary file left behind."""
    target = Path(path)
    _refuse_link(target, "regular file")
    tmp = target.with_name(f".{target.name}.tmp")
    fd = create_exclusive(tmp, mode)
    try:
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    if durable:
        sync_dir(target.parent)


def sync_dir(folder: str | os.PathLike[str]) -> None:
    """fsync of a folder, so a rename or an unlink in it survives a power cut."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_file(path: str | os.PathLike[str]) -> bytes:
    """The file's bytes, read without following a link at `path` (OSError ELOOP for one);
    UnsafePath for anything but a regular file (a FIFO would block the reader)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW)
    try:
        kind = os.fstat(fd).st_mode
        if stat.S_ISDIR(kind):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        if not stat.S_ISREG(kind):
            raise UnsafePath(errno.EINVAL, f"{path} is not a regular file", str(path))
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read()
    finally:
        os.close(fd)
