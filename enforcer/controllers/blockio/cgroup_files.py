"""A container's block-I/O cgroup folder on disk: where it is (`blockio_cgroup_dir`), what it
offers (`read_cgroup_io`, v1 blkio.* or v2 io.*) and the planned lines written, one write(2)
each (`apply_writes`). A weight the device cannot take (its scheduler is not bfq:
EOPNOTSUPP/EINVAL) is a warning, not an error."""

from __future__ import annotations

import errno
import logging
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from enforcer.controllers.blockio.plan import DEVICE_LINE, CgroupIO, Write, devices_in
from enforcer.controllers.blockio.settings import THROTTLES
from enforcer.controllers.cgroups import cgroup_path, cgroup_version
from enforcer.controllers.errors import ApplyError, BlockIOUnavailable
from resource_files.reads import read_value_file

log = logging.getLogger(__name__)
# A weight the device or cgroup cannot take: reported, never fatal.
_WEIGHT_ERRNOS = frozenset(
    {errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL, errno.ENODEV, errno.ERANGE, errno.ENOENT}
)


def read_cgroup_io(folder: str | os.PathLike[str]) -> CgroupIO:
    """Detects v1 (blkio.*) or v2 (io.*) by the files present; BlockIOUnavailable otherwise."""
    base = Path(folder)
    try:
        names = frozenset(os.listdir(base))
    except OSError as exc:
        raise BlockIOUnavailable(f"cannot read cgroup folder {base}: {exc.strerror}") from None
    if "cgroup.controllers" in names:
        version: Literal[1, 2] = 2
        if not names & {"io.max", "io.weight", "io.bfq.weight"}:
            raise BlockIOUnavailable(
                f"the io controller is not enabled for {base} (see cgroup.subtree_control of "
                "its parent)"
            )
    elif any(n.startswith("blkio.") for n in names):
        version = 1
    else:
        raise BlockIOUnavailable(f"{base} is not a blkio (v1) or io (v2) cgroup folder")
    cgroup = CgroupIO(version, names)
    watched = {cgroup.weight_device_file}
    if version == 1:
        watched.update(t[2] for t in THROTTLES)
    else:
        watched.add("io.max")
    current = {}
    for name in watched & names:
        try:
            current[name] = devices_in((base / name).read_text())
        except OSError:
            current[name] = frozenset()
    return CgroupIO(version, names, current)


def _scheduler(sysfs_root: str, line: str) -> str | None:
    match = DEVICE_LINE.match(line + " ")
    if not match:
        return None
    path = Path(sysfs_root, "dev", "block", f"{match.group(1)}:{match.group(2)}", "queue")
    try:
        text = read_value_file(path / "scheduler")
    except OSError:
        return None
    found = re.search(r"\[([^\]]+)\]", text)
    return found.group(1) if found else text.strip() or None


def apply_writes(
    folder: str | os.PathLike[str], writes: Iterable[Write], *, sysfs_root: str = "/sys"
) -> list[str]:
    """Writes each line with its own write(2). Returns warnings for weights the kernel would
    not take; raises ApplyError (after trying every line) for anything else it refused."""
    warnings: list[str] = []
    errors: list[str] = []
    base = Path(folder)
    for w in writes:
        path = base / w.file
        log.debug("blockio: %s <- %r", path, w.line)
        try:
            # O_APPEND: harmless on cgroupfs, and a stand-in folder keeps a log of writes.
            fd = os.open(path, os.O_WRONLY | os.O_APPEND)
            try:
                os.write(fd, (w.line + "\n").encode())
            finally:
                os.close(fd)
        except OSError as exc:
            if w.weight and exc.errno in _WEIGHT_ERRNOS:
                why = exc.strerror or str(exc)
                scheduler = _scheduler(sysfs_root, w.line)
                if scheduler is not None and scheduler != "bfq":
                    why += f": the device uses the {scheduler} I/O scheduler; weights need bfq"
                elif exc.errno == errno.ENOENT:
                    why = f"weights are not supported here (no {w.file})"
                warnings.append(f"blockio: weight not applied: {path} <- {w.line!r}: {why}")
                continue
            errors.append(f"{path} <- {w.line!r}: {exc.strerror or exc}")
    if errors:
        raise ApplyError("blockio: the kernel refused " + "; ".join(errors))
    return warnings


def blockio_cgroup_dir(
    cgroup_parent: str, container_id: str, cgroupfs_root: str = "/sys/fs/cgroup"
) -> Path:
    """The container's block-I/O cgroup folder: `<root>/blkio/<parent>/<id>` with cgroup v1
    (or hybrid), `<root>/<parent>/<id>` with the unified v2 layout."""
    controller = "blkio" if cgroup_version(cgroupfs_root) == 1 else None
    return Path(cgroup_path(controller, cgroup_parent, container_id, cgroupfs_root))
