"""What the topology model does not hold about each CPU, read from sysfs for the devices'
attributes: its L2 cache group and its core type (Intel hybrid: cpu_core / cpu_atom PMUs)."""

from __future__ import annotations

from pathlib import Path

from enforcer.dra.devices import CPUDetails
from enforcer.topology import CPUSet, Topology
from resource_files.reads import read_value_file


def read_cpu_details(topology: Topology, sysfs_root: str | Path = "/sys") -> dict[int, CPUDetails]:
    """CPU -> details; a file that is missing or unreadable leaves the default (the L2 group
    falls back to the core, the core type to `standard`)."""
    root = Path(sysfs_root) / "devices"
    p_cores = _cpus(root / "cpu_core" / "cpus")
    e_cores = _cpus(root / "cpu_atom" / "cpus")
    out = {}
    for cpu in topology.cpus:
        kind = "p-core" if cpu in p_cores else "e-core" if cpu in e_cores else "standard"
        out[cpu] = CPUDetails(
            l2_group=_l2_group(root / "system" / "cpu" / f"cpu{cpu}"), core_type=kind
        )
    return out


def _cpus(path: Path) -> CPUSet:
    text = _read(path)
    try:
        return CPUSet.parse(text) if text else CPUSet()
    except ValueError:
        return CPUSet()


def _l2_group(cpu_dir: Path) -> int | None:
    cache = cpu_dir / "cache"
    for index in sorted(cache.glob("index[0-9]*")):
        if _read(index / "level") != "2" or _read(index / "type") == "Instruction":
            continue
        shared = _cpus(index / "shared_cpu_list")
        return min(shared) if shared else None
    return None


def _read(path: Path) -> str:
    try:
        return read_value_file(path).strip()
    except (OSError, ValueError):
        return ""
