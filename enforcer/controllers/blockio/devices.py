"""Block devices for the `blockio` section: device globs -> whole-disk block devices, through
symlinks (an edge that reads /dev and sysfs). Named character devices and partitions are
refused; glob matches of those are skipped with a warning, so `/dev/disk/by-id/*SSD*` keeps
working."""

from __future__ import annotations

import glob
import os
import stat
from collections.abc import Sequence
from pathlib import Path

from enforcer.controllers.blockio.settings import (
    BlockDevice,
    BlockIOClass,
    Resolved,
    Resolver,
    compile_with,
)
from resource_contract.class_config import BlockIOConfig


def _python_glob(pattern: str) -> str:
    """Go's filepath.Match syntax (goresctrl) -> Python's: [^x] negates, \\x escapes."""
    out = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            out.append(glob.escape(pattern[i + 1]))
            i += 2
            continue
        if ch == "[" and pattern[i + 1 : i + 2] == "^":
            out.append("[!")
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _partition_of(sysfs_root: str, major: int, minor: int) -> str | None:
    """The whole disk's name when major:minor is a partition (sysfs has a `partition` file)."""
    node = Path(sysfs_root, "dev", "block", f"{major}:{minor}")
    if not (node / "partition").exists():
        return None
    parent = Path(os.path.realpath(node)).parent
    return parent.name if (parent / "dev").exists() else "?"


def resolve_devices(
    patterns: Sequence[str], *, key_path: str = "Devices", sysfs_root: str = "/sys"
) -> Resolved:
    """Globs -> whole-disk block devices (deduplicated, in order found)."""
    devices: dict[tuple[int, int], BlockDevice] = {}
    problems: list[str] = []
    warnings: list[str] = []
    for j, pattern in enumerate(patterns):
        where = f"{key_path}.{j}"
        literal = not glob.has_magic(pattern) and "\\" not in pattern
        matches = [pattern] if literal else sorted(glob.glob(_python_glob(pattern)))
        if literal and not os.path.lexists(pattern):
            matches = []
        if not matches:
            warnings.append(f'{where}: "{pattern}" matches no device on this machine')
            continue
        skipped = []
        for match in matches:
            real = os.path.realpath(match)
            shown = f'"{match}"' + (f" (-> {real})" if real != match else "")
            try:
                st = os.stat(real)
            except OSError as exc:
                warnings.append(f"{where}: {shown}: {exc.strerror}")
                continue
            reason = None
            if stat.S_ISCHR(st.st_mode):
                reason = "is a character device, not a block device"
            elif not stat.S_ISBLK(st.st_mode):
                reason = "is not a device"
            else:
                major, minor = os.major(st.st_rdev), os.minor(st.st_rdev)
                disk = _partition_of(sysfs_root, major, minor)
                if disk is not None:
                    reason = (
                        f"is a partition ({major}:{minor}); weights and throttling apply to "
                        f"whole disks: use /dev/{disk}"
                    )
                else:
                    devices.setdefault((major, minor), BlockDevice(major, minor, real))
            if reason and literal:
                problems.append(f"{where}: {shown} {reason}")
            elif reason:
                skipped.append(match)
        if skipped:
            listing = ", ".join(skipped[:5]) + (
                f" and {len(skipped) - 5} more" if len(skipped) > 5 else ""
            )
            warnings.append(
                f'{where}: "{pattern}" also matches {listing}: not whole-disk block devices, '
                "skipped"
            )
    return Resolved(tuple(devices.values()), tuple(problems), tuple(warnings))


def compile_classes(
    config: BlockIOConfig | None,
    *,
    sysfs_root: str = "/sys",
    resolver: Resolver | None = None,
) -> tuple[dict[str, BlockIOClass], list[str]]:
    """Configuration -> classes with resolved devices (this machine's, unless `resolver`), and
    warnings. Raises ConfigError (key paths) for a named device that is not a whole-disk block
    device, or bad syntax."""

    def default_resolver(patterns: Sequence[str], key_path: str) -> Resolved:
        return resolve_devices(patterns, key_path=key_path, sysfs_root=sysfs_root)

    return compile_with(config, resolver or default_resolver)
