"""This machine's whole-disk block device, for block-I/O tests and the demo."""

from __future__ import annotations

import os
import stat
from pathlib import Path

CANDIDATES = ("/dev/vda", "/dev/sda", "/dev/nvme0n1", "/dev/xvda")


def whole_disk() -> tuple[str, int, int] | None:
    """(path, major, minor) of the first whole-disk block device found, or None."""
    for path in CANDIDATES:
        try:
            st = os.stat(path)
        except OSError:
            continue
        major, minor = os.major(st.st_rdev), os.minor(st.st_rdev)
        if (
            stat.S_ISBLK(st.st_mode)
            and not Path(f"/sys/dev/block/{major}:{minor}/partition").exists()
        ):
            return path, major, minor
    return None
