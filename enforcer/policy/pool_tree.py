"""The pool tree of the topology-aware policy: root, sockets, dies and NUMA nodes over the
available CPUs, each pool with its CPUs, memory nodes and whole cores, fixed for the life of the
policy."""

from __future__ import annotations

from dataclasses import dataclass

from enforcer.topology import CPUSet, Topology

ROOT = "root"


@dataclass(frozen=True)
class Pool:
    """One node of the pool tree: fixed for the life of the policy."""

    index: int  # position in depth-first order: the last tie-breaker
    name: str  # "root", "socket0", "socket0/node2", "socket1/die0/node3"
    depth: int
    parent: int | None
    children: tuple[int, ...]
    cpus: CPUSet  # available CPUs, reserved and isolated included
    usable: CPUSet  # cpus - reserved - isolated: for shared and (multi-CPU) exclusive work
    isolated: CPUSet  # isolated CPUs, not reserved
    mems: CPUSet  # memory nodes of its CPUs plus their memory-only nodes
    memory_capacity: int
    cores: tuple[CPUSet, ...]  # cores whose every thread is usable
    chain: tuple[int, ...]  # itself, then its ancestors up to the root


def build_pool_tree(topology: Topology, available: CPUSet, reserved: CPUSet) -> list[Pool]:
    """The pools over `available`, root first, depth-first; a level with a single child is
    collapsed into its parent (a 1-socket 1-node machine has only the root)."""
    levels = _nested_levels(topology, available)
    raw: list[tuple[str, int, int | None, CPUSet]] = []  # name, depth, parent, cpus

    def grow(name: str, depth: int, parent: int | None, cpus: CPUSet, level: int) -> None:
        index = len(raw)
        raw.append((name, depth, parent, cpus))
        for label, unit, next_level in _children(levels, cpus, level):
            child = label if name == ROOT else f"{name}/{label}"
            grow(child, depth + 1, index, unit, next_level)

    grow(ROOT, 0, None, available, 0)
    children: dict[int, list[int]] = {i: [] for i in range(len(raw))}
    for i, (_, _, parent, _) in enumerate(raw):
        if parent is not None:
            children[parent].append(i)
    isolated = topology.isolated - reserved
    cores = [c for c in topology.cores() if c <= available - reserved - isolated]
    pools: list[Pool] = []
    for i, (name, depth, parent, cpus) in enumerate(raw):
        chain = [i]
        while (up := raw[chain[-1]][2]) is not None:
            chain.append(up)
        usable = cpus - reserved - isolated
        mems = topology.memory_nodes_of_cpus(cpus)
        pools.append(
            Pool(
                index=i,
                name=name,
                depth=depth,
                parent=parent,
                children=tuple(children[i]),
                cpus=cpus,
                usable=usable,
                isolated=cpus & isolated,
                mems=mems,
                memory_capacity=sum(topology.nodes[n].memory_bytes for n in mems),
                cores=tuple(c for c in cores if c <= usable),
                chain=tuple(chain),
            )
        )
    return pools


def _nested_levels(topology: Topology, available: CPUSet) -> list[list[tuple[str, CPUSet]]]:
    """Units of the socket, die and node levels over `available`, dropping a level whose units
    do not each hold whole units of the level below (so the tree stays a tree even where a
    NUMA node spans dies)."""
    units: list[list[tuple[str, CPUSet]]] = [
        [(f"socket{s}", cpus) for s, cpus in sorted(topology.units("socket").items())],
        [(f"die{d}", cpus) for (_, d), cpus in sorted(topology.units("die").items())],
        [(f"node{n}", topology.cpus_of_node(n)) for n in topology.cpu_nodes()],
    ]
    levels = [[(label, cpus & available) for label, cpus in level] for level in units]
    levels = [[(label, cpus) for label, cpus in level if cpus] for level in levels]
    changed = True
    while changed:
        changed = False
        for i in range(len(levels) - 1):
            upper, lower = levels[i], levels[i + 1]
            if not all(any(cpus <= up for _, up in upper) for _, cpus in lower):
                del levels[i]
                changed = True
                break
    return levels


def _children(
    levels: list[list[tuple[str, CPUSet]]], cpus: CPUSet, level: int
) -> list[tuple[str, CPUSet, int]]:
    """The units of the first level below `level` that splits `cpus` in two or more."""
    while level < len(levels):
        inside = [(label, unit) for label, unit in levels[level] if unit <= cpus]
        if len(inside) > 1:
            return [(label, unit, level + 1) for label, unit in inside]
        level += 1  # one unit: it is `cpus` itself, collapse the level
    return []
