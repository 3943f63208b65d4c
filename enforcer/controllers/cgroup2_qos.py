"""Memory QoS and CPU burst in a container's cgroup v2 folder: every write of those classes.

`memory.min`, `memory.low`, `memory.high`, `memory.swap.max` (a memory class) and
`cpu.max.burst` (a scheduling class's `cpuBurst`), read back for the verification sweep and put
back to the kernel's defaults on release. Everything takes the cgroup root as a parameter, so
the same code runs on a cgroup v2 machine and on a test's fake tree. On cgroup v1 none of these
files exist: `v1_problems` refuses such a configuration when it is read.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from decimal import Decimal

from enforcer.controllers.cgroups import cgroup_path, cgroup_version
from resource_contract.task_classes import MemoryClass, SchedulingClass, memory_bytes

# File -> the kernel's default (what a new cgroup has, and what a release puts back).
MEMORY_DEFAULTS: dict[str, str] = {
    "memory.min": "0",
    "memory.low": "0",
    "memory.high": "max",
    "memory.swap.max": "max",
}
BURST_FILE = "cpu.max.burst"
BURST_DEFAULT = "0"
PAGE = os.sysconf("SC_PAGE_SIZE")
_MEMORY_KEYS = {"min": "memory.min", "low": "memory.low", "high": "memory.high"}


def v1_problems(
    cgroupfs_root: str,
    scheduling: Mapping[str, SchedulingClass],
    memory: Mapping[str, MemoryClass],
) -> list[str]:
    """One `key.path: reason` line per key that needs cgroup v2, when the cgroups at
    `cgroupfs_root` are v1 (or hybrid); none on v2."""
    if cgroup_version(cgroupfs_root) == 2:
        return []
    where = f"the cgroups at {cgroupfs_root} are v1"
    problems = [
        f"memoryClasses.{name}: memory classes need cgroup v2 (memory.min, memory.low, "
        f"memory.high, memory.swap.max); {where}"
        for name in memory
    ]
    problems += [
        f"schedulingClasses.{name}.cpuBurst: CPU burst needs cgroup v2 (cpu.max.burst); {where}"
        for name, cls in scheduling.items()
        if cls.cpuBurst is not None
    ]
    return problems


def folder(cgroupfs_root: str, cgroup_parent: str, container_id: str) -> str:
    """The container's cgroup v2 folder."""
    return cgroup_path(None, cgroup_parent, container_id, cgroupfs_root)


def _write(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def _read(path: str) -> str:
    with open(path) as f:
        return f.read().strip()


def memory_values(cls: MemoryClass, limit: int) -> tuple[dict[str, str], list[str]]:
    """File -> value for a container whose memory limit is `limit` (0: none), and warnings
    for the levels left out (a ratio of a limit it does not have)."""
    values: dict[str, str] = {}
    warnings = []
    for key, name in _MEMORY_KEYS.items():
        setting = getattr(cls, key)
        found = memory_bytes(setting, limit)
        if found is not None:
            values[name] = str(found - found % PAGE)  # the kernel keeps whole pages
        elif setting is not None:
            warnings.append(f"memory class {key} {setting}: the container has no memory limit")
    if cls.swapMax is not None:
        swap = cls.swapMax
        values["memory.swap.max"] = "max" if swap == "max" else str(memory_bytes(swap, limit))
    return values, warnings


def write_memory(path: str, values: Mapping[str, str]) -> None:
    """Writes memory QoS files; OSError when the kernel refuses one."""
    for name, value in values.items():
        _write(os.path.join(path, name), value)


def read_memory(path: str, names: list[str]) -> dict[str, str]:
    return {name: _read(os.path.join(path, name)) for name in names}


def reset_memory(path: str, names: list[str] | None = None) -> None:
    """Puts the kernel's defaults back (all four files, or `names`)."""
    for name in names or list(MEMORY_DEFAULTS):
        _write(os.path.join(path, name), MEMORY_DEFAULTS[name])


def burst_value(path: str, burst_cpus: Decimal) -> str | None:
    """`cpu.max.burst` in microseconds for `burst_cpus` of the container's period, capped at
    its quota (the kernel refuses more); None when it has no quota (nothing to burst over)."""
    quota, _, period = _read(os.path.join(path, "cpu.max")).partition(" ")
    if quota == "max":
        return None
    return str(min(int(burst_cpus * int(period or "100000")), int(quota)))


def write_burst(path: str, value: str) -> None:
    _write(os.path.join(path, BURST_FILE), value)


def read_burst(path: str) -> str:
    return _read(os.path.join(path, BURST_FILE))


def reset_burst(path: str) -> None:
    _write(os.path.join(path, BURST_FILE), BURST_DEFAULT)
