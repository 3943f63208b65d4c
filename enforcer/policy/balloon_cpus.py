"""Where a balloon's CPUs come from: the free CPUs nearest to those it has when it inflates,
and the idle CPUs it shares within its topology unit (`shareIdleCPUsInSame`)."""

from __future__ import annotations

from typing import Any

from enforcer.cpuallocator import allocate_cpus
from enforcer.topology import CPUSet, Topology

# shareIdleCPUsInSame -> the topology level whose units bound the shared idle CPUs. The
# topology reads no L2 groups; an L2 cache is a core's own on the machines we know.
_SHARE_LEVEL = {
    "package": "socket",
    "die": "die",
    "numa": "node",
    "l2cache": "core",
    "core": "core",
}
# Inflating: the free CPUs nearest to the balloon's, tightest unit first.
_NEAR_LEVELS = ("core", "l3", "node", "die", "socket")


def near(topology: Topology, cpus: CPUSet, free: CPUSet, n: int) -> CPUSet:
    """n free CPUs as close to `cpus` as they come (the smallest unit around them that has
    enough: core, L3 group, NUMA node, die or socket), packed by the allocator."""
    if cpus:
        infos = [topology.cpus[c] for c in cpus]
        scopes = []
        for level in _NEAR_LEVELS:
            units = topology.units(level)  # type: ignore[arg-type]
            keys = {_unit_key(level, i) for i in infos}
            around = CPUSet().union(*(units[k] for k in keys if k in units))
            if len(free & around) >= n:
                scopes.append((len(around), free & around))
        if scopes:
            return allocate_cpus(topology, min(scopes, key=lambda s: s[0])[1], n, kind="")
    return allocate_cpus(topology, free, n, kind="")


def shared_idle(topology: Topology, level: str, cpus: CPUSet, idle: CPUSet) -> CPUSet:
    """The `idle` CPUs a balloon on `cpus` shares with its containers under
    `shareIdleCPUsInSame: level`: all of them for "system", else those in the same units."""
    if level == "system" or not idle:
        return idle
    unit_level = _SHARE_LEVEL[level]
    units = topology.units(unit_level)  # type: ignore[arg-type]
    keys = {_unit_key(unit_level, topology.cpus[c]) for c in cpus}
    return idle & CPUSet().union(*(units[k] for k in keys if k in units))


def _unit_key(level: str, info: Any) -> Any:
    if level == "die":
        return info.die_key
    return getattr(info, level)
