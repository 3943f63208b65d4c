"""The hardware topology as plain immutable data: CPUs, cores, L3 groups, dies, sockets, nodes.

No I/O here: `enforcer.sysfs` builds a Topology from sysfs, tests build one with
`Topology.synthetic(...)`, and state files store one with `to_dict()`/`from_dict()`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Any, Literal

from enforcer.topology.cpuset import CPUSet

# sysfs reports NUMA distances relative to 10 for local memory.
LOCAL_DISTANCE = 10

Level = Literal["socket", "die", "node", "l3", "core"]
DieKey = tuple[int, int]  # (socket, die): die ids restart at 0 in every socket


class TopologyError(ValueError):
    """The topology could not be read or is inconsistent; the message names the cause."""


@dataclass(frozen=True)
class CPUInfo:
    """One online logical CPU (hardware thread) and where it sits."""

    id: int
    socket: int
    die: int  # die within the socket; 0 when the kernel does not report dies
    node: int
    core: int  # lowest CPU id among the thread siblings: unique across the machine
    l3: int | None = None  # L3 cache group id; None when unknown
    isolated: bool = False  # in the kernel's isolcpus list

    @property
    def die_key(self) -> DieKey:
        return (self.socket, self.die)


@dataclass(frozen=True)
class NumaNode:
    """A NUMA node; one without CPUs holds memory only (PMEM, HBM or CXL memory)."""

    id: int
    cpus: CPUSet = field(default_factory=CPUSet)
    memory_bytes: int = 0
    # node id -> distance; excluded from the hash because a dict is not hashable
    distances: Mapping[int, int] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "cpus", CPUSet(self.cpus))
        object.__setattr__(self, "distances", dict(sorted(self.distances.items())))

    @property
    def memory_only(self) -> bool:
        return not self.cpus

    def distance(self, other: int) -> int | None:
        return self.distances.get(other)


@dataclass(frozen=True, eq=True)
class Topology:
    """The machine: online CPUs by id and NUMA nodes by id, with query helpers."""

    cpus: Mapping[int, CPUInfo]
    nodes: Mapping[int, NumaNode]

    def __post_init__(self) -> None:
        # Private sorted copies: a Topology is shared by every policy and must not change under
        # them (plain dicts rather than proxies so it still pickles and deep-copies).
        object.__setattr__(self, "cpus", dict(sorted(self.cpus.items())))
        object.__setattr__(self, "nodes", dict(sorted(self.nodes.items())))
        self._check()

    def _check(self) -> None:
        for cpu_id, info in self.cpus.items():
            if cpu_id != info.id:
                raise TopologyError(f"CPU {cpu_id} is stored under the wrong id {info.id}")
            if info.node not in self.nodes:
                raise TopologyError(f"CPU {cpu_id} is in NUMA node {info.node}, which is unknown")
            if info.core not in self.cpus or self.cpus[info.core].core != info.core:
                raise TopologyError(f"CPU {cpu_id} names core {info.core}, which is not a core")
        for node_id, node in self.nodes.items():
            if node_id != node.id:
                raise TopologyError(f"NUMA node {node_id} is stored under the wrong id {node.id}")
            expected = CPUSet(c.id for c in self.cpus.values() if c.node == node_id)
            if node.cpus != expected:
                raise TopologyError(
                    f"NUMA node {node_id} lists CPUs {node.cpus}, but its CPUs are {expected}"
                )

    # ----- whole-machine views -------------------------------------------------------------

    @cached_property
    def online(self) -> CPUSet:
        return CPUSet(self.cpus)

    @cached_property
    def isolated(self) -> CPUSet:
        return CPUSet(c.id for c in self.cpus.values() if c.isolated)

    def sockets(self) -> list[int]:
        return sorted(self._units("socket"))

    def dies(self, socket: int) -> list[int]:
        return sorted(die for s, die in self._units("die") if s == socket)

    def node_ids(self) -> list[int]:
        return list(self.nodes)

    def cpu_nodes(self) -> list[int]:
        """Nodes that have CPUs."""
        return [n.id for n in self.nodes.values() if not n.memory_only]

    def memory_only_nodes(self) -> list[int]:
        return [n.id for n in self.nodes.values() if n.memory_only]

    def l3_groups(self) -> list[int]:
        return sorted(self._units("l3"))

    def cores(self) -> list[CPUSet]:
        """Each core's online threads, ordered by the core's lowest CPU id."""
        return [cpus for _, cpus in sorted(self._units("core").items())]

    # ----- CPUs of a unit ------------------------------------------------------------------

    def cpus_of_socket(self, socket: int) -> CPUSet:
        return self._units("socket").get(socket, CPUSet())

    def cpus_of_die(self, socket: int, die: int) -> CPUSet:
        return self._units("die").get((socket, die), CPUSet())

    def cpus_of_node(self, node: int) -> CPUSet:
        return self.nodes[node].cpus if node in self.nodes else CPUSet()

    def cpus_of_l3(self, l3: int) -> CPUSet:
        return self._units("l3").get(l3, CPUSet())

    def cpus_of_core(self, core: int) -> CPUSet:
        """The threads of the core whose key (lowest thread id) is `core`."""
        return self._units("core").get(core, CPUSet())

    def siblings(self, cpu: int) -> CPUSet:
        """The threads of the core that holds `cpu`, `cpu` included."""
        return self.cpus_of_core(self.cpus[cpu].core)

    def units(self, level: Level) -> Mapping[Any, CPUSet]:
        """All units of a level, unit key -> CPUs. Die keys are (socket, die) pairs."""
        return MappingProxyType(self._units(level))

    # ----- relations -----------------------------------------------------------------------

    def nodes_of_socket(self, socket: int) -> list[int]:
        return sorted({c.node for c in self.cpus.values() if c.socket == socket})

    def nodes_of_die(self, socket: int, die: int) -> list[int]:
        return sorted({c.node for c in self.cpus.values() if c.die_key == (socket, die)})

    def sockets_of_cpus(self, cpus: Iterable[int]) -> set[int]:
        return {self.cpus[c].socket for c in cpus}

    def nodes_of_cpus(self, cpus: Iterable[int]) -> set[int]:
        return {self.cpus[c].node for c in cpus}

    def distance(self, a: int, b: int) -> int | None:
        return self.nodes[a].distance(b)

    def nearest_memory_only_nodes(self, node_ids: Iterable[int]) -> set[int]:
        """Memory-only nodes attached to any of `node_ids`.

        A memory-only node is attached to the CPU node(s) closest to it: on the 'server'
        snapshot PMEM node 4 belongs to node 0 (distance 17) and not to node 1 (distance 28).
        """
        wanted = set(node_ids)
        return {m for m, owners in self._memory_only_owners.items() if owners & wanted}

    def memory_nodes_of_cpus(self, cpus: Iterable[int], *, memory_only: bool = True) -> CPUSet:
        """The nodes to put in cpuset.mems for a container running on `cpus`."""
        nodes = self.nodes_of_cpus(cpus)
        if memory_only:
            nodes |= self.nearest_memory_only_nodes(nodes)
        return CPUSet(nodes)

    @cached_property
    def _memory_only_owners(self) -> dict[int, set[int]]:
        owners: dict[int, set[int]] = {}
        cpu_nodes = self.cpu_nodes()
        for mem in self.memory_only_nodes():
            dists = {n: d for n in cpu_nodes if (d := self.distance(mem, n)) is not None}
            if dists:
                best = min(dists.values())
                owners[mem] = {n for n, d in dists.items() if d == best}
        return owners

    # ----- unit index ----------------------------------------------------------------------

    def _units(self, level: Level) -> dict[Any, CPUSet]:
        return self._unit_index[level]

    @cached_property
    def _unit_index(self) -> dict[str, dict[Any, CPUSet]]:
        keys: dict[str, Callable[[CPUInfo], Any]] = {
            "socket": lambda c: c.socket,
            "die": lambda c: c.die_key,
            "node": lambda c: c.node,
            "l3": lambda c: c.l3,
            "core": lambda c: c.core,
        }
        index: dict[str, dict[Any, CPUSet]] = {}
        for level, key in keys.items():
            groups: dict[Any, list[int]] = defaultdict(list)
            for info in self.cpus.values():
                groups[key(info)].append(info.id)
            groups.pop(None, None)  # CPUs with an unknown L3 form no group
            index[level] = {k: CPUSet(v) for k, v in groups.items()}
        # Memory-only nodes have no CPUs but are still nodes; keep the node index complete.
        index["node"] = {n.id: n.cpus for n in self.nodes.values() if n.cpus}
        return index

    # ----- serialisation -------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form: cpusets as Linux list strings, node ids as JSON object keys."""
        return {
            "cpus": [
                {
                    "id": c.id,
                    "socket": c.socket,
                    "die": c.die,
                    "node": c.node,
                    "core": c.core,
                    "l3": c.l3,
                    "isolated": c.isolated,
                }
                for c in self.cpus.values()
            ],
            "nodes": [
                {
                    "id": n.id,
                    "cpus": str(n.cpus),
                    "memoryBytes": n.memory_bytes,
                    "distances": {str(k): v for k, v in sorted(n.distances.items())},
                }
                for n in self.nodes.values()
            ],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Topology:
        try:
            cpus = {
                int(c["id"]): CPUInfo(
                    id=int(c["id"]),
                    socket=int(c["socket"]),
                    die=int(c.get("die", 0)),
                    node=int(c["node"]),
                    core=int(c["core"]),
                    l3=None if c.get("l3") is None else int(c["l3"]),
                    isolated=_as_bool(c.get("isolated", False)),
                )
                for c in data["cpus"]
            }
            nodes = {
                int(n["id"]): NumaNode(
                    id=int(n["id"]),
                    cpus=CPUSet.parse(n.get("cpus", "")),
                    memory_bytes=int(n.get("memoryBytes", 0)),
                    distances={int(k): int(v) for k, v in n.get("distances", {}).items()},
                )
                for n in data["nodes"]
            }
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            if isinstance(err, TopologyError):
                raise
            raise TopologyError(f"malformed stored topology: {type(err).__name__}: {err}") from err
        return cls(cpus=cpus, nodes=nodes)

    # ----- synthetic machines for tests ----------------------------------------------------

    @classmethod
    def synthetic(
        cls,
        *,
        sockets: int = 1,
        dies_per_socket: int = 1,
        nodes_per_die: int = 1,
        cores_per_node: int = 4,
        threads_per_core: int = 2,
        l3: Literal["socket", "die", "node", "none"] = "die",
        isolated: str | Iterable[int] = "",
        memory_only_nodes: int = 0,
        memory_per_node: int = 16 << 30,
    ) -> Topology:
        """A regular machine numbered as Linux does on x86: first thread of every core, then
        the second thread of every core, and so on (core 0 = CPUs 0 and N/2 with 2 threads).

        Memory-only nodes get the ids after the CPU nodes and are attached round-robin to the
        CPU nodes (distance 17 to their owner, 28 to every other node).
        """
        if min(sockets, dies_per_socket, nodes_per_die, cores_per_node, threads_per_core) < 1:
            raise ValueError("every count of a synthetic topology must be at least 1")
        iso = CPUSet.parse(isolated) if isinstance(isolated, str) else CPUSet(isolated)
        # (socket, die, node) of every core, in core order
        places = [
            (s, d, (s * dies_per_socket + d) * nodes_per_die + n)
            for s in range(sockets)
            for d in range(dies_per_socket)
            for n in range(nodes_per_die)
            for _ in range(cores_per_node)
        ]
        ncores = len(places)
        l3_of: Callable[[int, int, int], int | None] = {
            "socket": lambda s, d, n: s,
            "die": lambda s, d, n: s * dies_per_socket + d,
            "node": lambda s, d, n: n,
            "none": lambda s, d, n: None,
        }[l3]
        cpus: dict[int, CPUInfo] = {}
        for thread in range(threads_per_core):
            for core, (s, d, n) in enumerate(places):
                cpu = thread * ncores + core
                cpus[cpu] = CPUInfo(cpu, s, d, n, core, l3_of(s, d, n), cpu in iso)
        unknown = iso - CPUSet(cpus)
        if unknown:
            raise ValueError(f"isolated CPUs {unknown} are not in the synthetic machine")
        ncpu_nodes = sockets * dies_per_socket * nodes_per_die
        node_socket = {n: s for s, _, n in places}
        node_die = {n: (s, d) for s, d, n in places}
        owner = {ncpu_nodes + i: i % ncpu_nodes for i in range(memory_only_nodes)}
        all_nodes = range(ncpu_nodes + memory_only_nodes)

        def dist(a: int, b: int) -> int:
            if a == b:
                return LOCAL_DISTANCE
            if a in owner or b in owner:
                return 17 if owner.get(a) == b or owner.get(b) == a else 28
            if node_die[a] == node_die[b]:
                return 11
            return 12 if node_socket[a] == node_socket[b] else 21

        nodes = {
            n: NumaNode(
                id=n,
                cpus=CPUSet(c.id for c in cpus.values() if c.node == n),
                memory_bytes=memory_per_node,
                distances={m: dist(n, m) for m in all_nodes},
            )
            for n in all_nodes
        }
        return cls(cpus=cpus, nodes=nodes)

    def describe(self) -> str:
        """One line summary, handy in logs and test failure messages."""
        return (
            f"{len(self.sockets())} sockets, {len(self._units('die'))} dies, "
            f"{len(self.cpu_nodes())} CPU nodes + {len(self.memory_only_nodes())} memory-only, "
            f"{len(self._units('l3'))} L3 groups, {len(self._units('core'))} cores, "
            f"{len(self.cpus)} threads, isolated {self.isolated or 'none'}"
        )


def _as_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    raise TypeError(f"expected true or false, got {value!r}")
