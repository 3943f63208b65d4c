"""Read the hardware topology from sysfs (`<root>/devices/system/{cpu,node}`).

The model it builds (`enforcer.topology`) does no I/O: the files are read here. Files that
older kernels or containers lack are optional; a file that exists but holds garbage raises
TopologyError naming the file.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from enforcer.topology.cpuset import CPUSet
from enforcer.topology.model import CPUInfo, NumaNode, Topology, TopologyError
from resource_files.reads import read_value_file

_CPU_DIR = re.compile(r"cpu(\d+)", re.ASCII)  # int() would read "cpu٣" as CPU 3
_NODE_DIR = re.compile(r"node(\d+)", re.ASCII)
_INDEX_DIR = re.compile(r"index(\d+)", re.ASCII)
_MEMTOTAL = re.compile(r"^Node\s+\d+\s+MemTotal:\s+(\d+)\s*kB\s*$", re.MULTILINE | re.ASCII)


@dataclass(frozen=True)
class _RawCPU:
    id: int
    socket: int
    die: int
    core_id: int
    siblings: CPUSet | None  # None: the kernel gave no sibling list
    l3_cpus: CPUSet | None
    l3_id: int | None


def read_online_cpus(sysfs_root: Path | str = "/sys") -> CPUSet:
    """The CPUs online now (`<root>/devices/system/cpu/online`); TopologyError naming the file
    when it is missing or holds garbage. Cheap: one small file, read again on every call."""
    return _read_cpuset(Path(sysfs_root) / "devices" / "system" / "cpu" / "online")


def read_topology(sysfs_root: Path | str = "/sys") -> Topology:
    """Discover the topology of the machine whose sysfs is mounted at `sysfs_root`."""
    system = Path(sysfs_root) / "devices" / "system"
    cpu_dir = system / "cpu"
    online = _read_cpuset(cpu_dir / "online")
    isolated = _read_optional_cpuset(cpu_dir / "isolated") or CPUSet()
    raws = [
        raw for cpu in sorted(online) if (raw := _read_cpu(cpu_dir / f"cpu{cpu}", cpu)) is not None
    ]
    if not raws:
        raise TopologyError(f"{cpu_dir}: no online CPU has a topology folder")
    present = CPUSet(r.id for r in raws)
    cores = _core_keys(raws, present)
    l3s = _l3_groups(raws, present)
    node_cpus, node_mem, node_dist = _read_nodes(system / "node", present)
    node_of = _node_of_cpus(node_cpus, present)
    cpus = {
        r.id: CPUInfo(
            id=r.id,
            socket=r.socket,
            die=r.die,
            node=node_of[r.id],
            core=cores[r.id],
            l3=l3s.get(r.id),
            isolated=r.id in isolated,
        )
        for r in raws
    }
    nodes = {
        n: NumaNode(
            id=n,
            cpus=CPUSet(c.id for c in cpus.values() if c.node == n),
            memory_bytes=node_mem.get(n, 0),
            distances=node_dist.get(n, {}),
        )
        for n in node_cpus
    }
    return Topology(cpus=cpus, nodes=nodes)


# ----- CPUs --------------------------------------------------------------------------------


def _read_cpu(path: Path, cpu: int) -> _RawCPU | None:
    topo = path / "topology"
    if not topo.is_dir():
        return None  # an offline CPU has no topology folder
    siblings = _read_optional_cpuset(topo / "thread_siblings_list")
    if siblings is None:
        siblings = _read_optional_cpuset(topo / "core_cpus_list")
    l3_cpus, l3_id = _read_l3(path / "cache")
    return _RawCPU(
        id=cpu,
        # ARM and some VMs report -1 for "unknown package": treat it as the one socket.
        socket=max(_read_int(topo / "physical_package_id"), 0),
        die=max(_read_optional_int(topo / "die_id") or 0, 0),
        core_id=_read_int(topo / "core_id"),
        siblings=siblings,
        l3_cpus=l3_cpus,
        l3_id=l3_id,
    )


def _core_keys(raws: list[_RawCPU], present: CPUSet) -> dict[int, int]:
    """CPU -> lowest online thread sibling: a core key unique across the machine."""
    by_core_id: dict[tuple[int, int, int], list[int]] = defaultdict(list)
    for r in raws:
        by_core_id[(r.socket, r.die, r.core_id)].append(r.id)
    # Union-find, so that sibling lists which disagree still give each CPU exactly one core.
    parent = {cpu: cpu for cpu in present}

    def root(cpu: int) -> int:
        while parent[cpu] != cpu:
            parent[cpu] = parent[parent[cpu]]
            cpu = parent[cpu]
        return cpu

    for r in raws:
        # Without a sibling list, threads of a core share (package, die, core_id).
        group = r.siblings if r.siblings is not None else by_core_id[(r.socket, r.die, r.core_id)]
        for other in CPUSet(group) & present:
            a, b = root(r.id), root(other)
            parent[max(a, b)] = min(a, b)
    return {cpu: root(cpu) for cpu in present}


def _read_l3(cache: Path) -> tuple[CPUSet | None, int | None]:
    if not cache.is_dir():
        return None, None
    for index in sorted(cache.iterdir(), key=lambda p: p.name):
        if not _INDEX_DIR.fullmatch(index.name):
            continue
        level = _read_optional_int(index / "level")
        kind = _read_text(index / "type", optional=True)
        if level != 3 or (kind is not None and kind.strip() == "Instruction"):
            continue
        shared = _read_optional_cpuset(index / "shared_cpu_list")
        if shared is None:
            return None, None
        return shared, _read_optional_int(index / "id")
    return None, None


def _l3_groups(raws: list[_RawCPU], present: CPUSet) -> dict[int, int]:
    """CPU -> L3 group id: the cache's `id` when every group has a distinct one, otherwise
    groups are numbered in the order of their lowest CPU."""
    groups: dict[CPUSet, set[int | None]] = defaultdict(set)
    members: dict[CPUSet, list[int]] = defaultdict(list)
    for r in raws:
        if r.l3_cpus is None:
            continue
        key = (r.l3_cpus & present) | {r.id}
        groups[key].add(r.l3_id)
        members[key].append(r.id)
    ordered = sorted(groups, key=min)
    given = [next(iter(groups[g])) if len(groups[g]) == 1 else None for g in ordered]
    ids: list[int] = [i for i in given if i is not None]
    if len(set(ids)) != len(ordered):
        ids = list(range(len(ordered)))
    return {cpu: gid for g, gid in zip(ordered, ids, strict=True) for cpu in members[g]}


# ----- NUMA nodes --------------------------------------------------------------------------


def _read_nodes(
    node_dir: Path, present: CPUSet
) -> tuple[dict[int, CPUSet], dict[int, int], dict[int, dict[int, int]]]:
    """(node -> CPUs, node -> memory bytes, node -> distances) for the online nodes."""
    online = _read_optional_cpuset(node_dir / "online")
    if online is None:
        online = CPUSet(
            int(m.group(1))
            for p in (node_dir.iterdir() if node_dir.is_dir() else ())
            if (m := _NODE_DIR.fullmatch(p.name)) and p.is_dir()
        )
    if not online:
        # No NUMA information at all (CONFIG_NUMA off, or a minimal sysfs): one node.
        return {0: present}, {}, {}
    cpus, mem, dist = {}, {}, {}
    node_ids = sorted(online)
    for n in node_ids:
        path = node_dir / f"node{n}"
        cpus[n] = _node_cpus(path) & present
        total = _read_meminfo(path / "meminfo")
        if total is not None:
            mem[n] = total
        values = _read_distances(path / "distance", len(node_ids))
        if values is not None:
            dist[n] = dict(zip(node_ids, values, strict=True))
    return cpus, mem, dist


def _node_cpus(path: Path) -> CPUSet:
    listed = _read_optional_cpuset(path / "cpulist")
    if listed is not None:
        return listed
    # Fall back on the cpuN links that every node folder also holds.
    if not path.is_dir():
        return CPUSet()
    return CPUSet(int(m.group(1)) for p in path.iterdir() if (m := _CPU_DIR.fullmatch(p.name)))


def _node_of_cpus(node_cpus: dict[int, CPUSet], present: CPUSet) -> dict[int, int]:
    node_of: dict[int, int] = {}
    for n, cpus in sorted(node_cpus.items(), reverse=True):
        node_of.update(dict.fromkeys(cpus, n))  # a CPU listed twice goes to the lowest node
    if len(node_of) < len(present):
        # A CPU that no node lists: put it on the lowest node that has CPUs (or any node).
        with_cpus = [n for n, c in sorted(node_cpus.items()) if c] or sorted(node_cpus)
        for cpu in present - CPUSet(node_of):
            node_of[cpu] = with_cpus[0]
    return node_of


def _read_meminfo(path: Path) -> int | None:
    text = _read_text(path, optional=True)
    if text is None:
        return None
    match = _MEMTOTAL.search(text)
    if not match:
        raise TopologyError(f"{path}: no 'Node N MemTotal: X kB' line in {_excerpt(text)}")
    return int(match.group(1)) * 1024


def _read_distances(path: Path, count: int) -> list[int] | None:
    text = _read_text(path, optional=True)
    if text is None:
        return None
    fields = text.split()
    if len(fields) != count or not all(f.isascii() and f.isdigit() for f in fields):
        raise TopologyError(
            f"{path}: expected {count} distances (one per online node), got {_excerpt(text)}"
        )
    return [int(f) for f in fields]


_INTEGER = re.compile(r"-?[0-9]{1,18}", re.ASCII)


# ----- file helpers ------------------------------------------------------------------------


def _read_text(path: Path, *, optional: bool = False) -> str | None:
    try:
        return read_value_file(path)  # a FIFO or a huge file is refused, never waited on
    except FileNotFoundError:
        if optional:
            return None
        raise TopologyError(f"{path}: missing") from None
    except OSError as err:
        raise TopologyError(f"{path}: cannot read: {err.strerror or err}") from err


def _read_int(path: Path) -> int:
    value = _read_optional_int(path)
    if value is None:
        raise TopologyError(f"{path}: missing")
    return value


def _read_optional_int(path: Path) -> int | None:
    text = _read_text(path, optional=True)
    if text is None:
        return None
    value = text.strip(" \t\n")
    # int() would also take "1_0", "+3" and other scripts' digits; the kernel writes none.
    if not _INTEGER.fullmatch(value):
        raise TopologyError(f"{path}: expected an integer, got {_excerpt(text)}")
    return int(value)


def _read_cpuset(path: Path) -> CPUSet:
    value = _read_optional_cpuset(path)
    if value is None:
        raise TopologyError(f"{path}: missing")
    return value


def _read_optional_cpuset(path: Path) -> CPUSet | None:
    text = _read_text(path, optional=True)
    if text is None:
        return None
    try:
        return CPUSet.parse(text)
    except ValueError:
        raise TopologyError(f"{path}: expected a CPU list, got {_excerpt(text)}") from None


def _excerpt(text: str, limit: int = 80) -> str:
    text = text.strip()
    return repr(text if len(text) <= limit else text[:limit] + "...")
