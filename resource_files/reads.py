"""Outside files read within bounds: never blocking on a FIFO or a device, never reading more
than the bound (the text is then parsed by `resource_contract.bounded`)."""

from __future__ import annotations

import errno
import os
import stat

from resource_contract.bounded import BoundError, Limits, decode_utf8, size_text


class NotRegularFile(OSError):
    """A path that is not a regular file (a FIFO, a device, a socket): refused unread."""


def read_bounded(path: str | os.PathLike[str], max_bytes: int) -> bytes:
    """The bytes of the regular file at `path`, at most `max_bytes` of them. Never blocks on
    a FIFO or a device: opened with O_NONBLOCK and refused (NotRegularFile) unless regular.
    BoundError when the file is larger; OSError when it cannot be read."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        if not stat.S_ISREG(mode):
            raise NotRegularFile(
                errno.EINVAL, f"not a regular file (a {_kind(mode)}); refused unread", str(path)
            )
        chunks = []
        left = max_bytes + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise BoundError(f"larger than {size_text(max_bytes)}")
    return data


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISSOCK, "socket"),
    ):
        if test(mode):
            return name
    return "special file"


def read_text_file(path: str | os.PathLike[str], limits: Limits) -> str:
    """A UTF-8 text file within `limits.max_bytes`: OSError (NotRegularFile included) when it
    cannot be read, BoundError when too large or not UTF-8."""
    return decode_utf8(read_bounded(path, limits.max_bytes))


# A sysfs, resctrl or cgroup value: the kernel writes at most a page for most, and a CPU list of
# the largest machine is about 40 KB; a file beyond this is not a kernel's value.
VALUE_FILE_MAX_BYTES = 1 << 20


def read_value_file(path: str | os.PathLike[str]) -> str:
    """A kernel value file's text (sysfs, resctrl, cgroups; ASCII, anything else replaced):
    never blocks on a FIFO and never reads more than VALUE_FILE_MAX_BYTES. Any refusal is an
    OSError (NotRegularFile, EFBIG), as the callers' other read failures are."""
    try:
        raw = read_bounded(path, VALUE_FILE_MAX_BYTES)
    except BoundError as exc:
        raise OSError(errno.EFBIG, str(exc), str(path)) from None
    return raw.decode("ascii", "replace")
