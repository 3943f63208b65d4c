"""Real sysfs snapshots of servers (tests/testdata/sysfs: Apache-2.0 data of
containers/nri-plugins), extracted for tests, benchmarks and demos of the topology code."""

from __future__ import annotations

import re
import tarfile
from collections.abc import Iterator
from pathlib import Path

TESTDATA = Path(__file__).resolve().parents[2] / "tests" / "testdata" / "sysfs"

# snapshot name -> (archive, folder inside the archive that stands for /sys)
SNAPSHOTS: dict[str, tuple[str, str]] = {
    "4-socket-server-nosnc": ("servers-and-desktop.tar.bz2", "sysfs/4-socket-server-nosnc/sys"),
    "server": ("servers-and-desktop.tar.bz2", "sysfs/server/sys"),
    "desktop": ("servers-and-desktop.tar.bz2", "sysfs/desktop/sys"),
    "2-socket-4-node-40-core": (
        "2-socket-4-node-40-core.tar.bz2",
        "sysfs/2-socket-4-node-40-core/sys",
    ),
    "sample1": ("sample1.tar.xz", "sample1/sys"),
    "sample2": ("sample2.tar.xz", "sample2/sys"),
}

# Only what the topology reader looks at. The archives also hold cpufreq, cpuidle, L1 cache and
# memory block folders; extracting those would triple the time, as the cost is per file.
_WANTED = re.compile(
    r"(^|/)devices/system/("
    r"node(/node\d+(/(cpulist|meminfo|distance|cpu\d+))?|/online|/possible)?"
    r"|cpu(/(online|offline|possible|present|isolated))?"
    r"|cpu/cpu\d+(/(topology(/(physical_package_id|die_id|core_id|thread_siblings_list"
    r"|core_cpus_list))?|cache(/index[23](/(level|type|id|shared_cpu_list))?)?))?"
    r")$"
)


def _members(tar: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    # A generator keeps extraction to one pass over the compressed stream.
    return (m for m in tar if _WANTED.search(m.name))


def extract_snapshots(root: Path, names: list[str] | None = None) -> dict[str, Path]:
    """Extracts the snapshots (all, or `names`) under root; name -> folder standing for /sys."""
    wanted = {n: SNAPSHOTS[n] for n in (names or SNAPSHOTS)}
    for archive in sorted({archive for archive, _ in wanted.values()}):
        with tarfile.open(TESTDATA / archive) as tar:
            tar.extractall(root, members=_members(tar), filter="data")
    return {name: root / inner for name, (_, inner) in wanted.items()}
