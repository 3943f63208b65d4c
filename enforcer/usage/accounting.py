"""CPU and memory use by pool and by NUMA node, measured from a policy's admitted containers.

Every online CPU has one use, as `status`'s CPU map shows it: `exclusive` (a container holds it),
`claimed` (a prepared DRA claim holds it, for the containers of the claim), `reserved`,
`isolated` (an isolated CPU nobody holds, kept for exclusive use by policies that do not run
shared containers there), `shared` (shared containers run there), or `unavailable` (outside
`availableCPUs`, not counted). `free` counts the CPUs that could still be handed out
exclusively: the shared and isolated ones, less the whole CPUs that the CPU requests granted to
shared containers there need (a container's grant counts in a zone when all its shared CPUs lie
in it).

Memory per NUMA node: its capacity, all of it allocatable (the enforcer reserves none), and
available = capacity less the memory (limit, else request) of containers whose memory is pinned
to it, split over their memory nodes in proportion to their size.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from enforcer.decode.dra_claims import CLAIM_SOURCE
from enforcer.policy import Policy
from enforcer.policy.pool_math import split_memory
from enforcer.topology import CPUSet, Topology

USES = ("reserved", "shared", "exclusive", "claimed", "isolated", "free")


@dataclass(frozen=True)
class CpuUse:
    """CPU counts of one zone (a pool, a NUMA node, a socket)."""

    reserved: int
    shared: int
    exclusive: int
    isolated: int
    free: int
    claimed: int = 0


@dataclass(frozen=True)
class NodeUsage:
    """One NUMA node: its CPUs and memory, what is allocatable and what is still available."""

    node: int
    socket: int | None  # None for a memory-only node
    cpus: CPUSet  # online
    cpu: CpuUse
    cpu_allocatable: int  # available to containers: online, in availableCPUs, not reserved
    memory_capacity: int  # bytes
    memory_available: int  # bytes; may be below 0 where Burstable limits overcommit
    distances: tuple[tuple[int, int], ...]  # (other node, distance), the node itself included

    @property
    def cpu_capacity(self) -> int:
        return len(self.cpus)

    @property
    def cpu_available(self) -> int:
        return self.cpu.free

    @property
    def memory_allocatable(self) -> int:
        return self.memory_capacity


@dataclass(frozen=True)
class PoolUsage:
    name: str
    cpus: CPUSet
    cpu: CpuUse


@dataclass(frozen=True)
class Usage:
    """The node's use at one moment: a snapshot that no later decision changes."""

    policy: str
    nodes: tuple[NodeUsage, ...]
    pools: tuple[PoolUsage, ...]


def measure(topology: Topology, policy: Policy) -> Usage:
    """The use of every NUMA node and pool under `policy` now."""
    reserved = policy.reserved
    available = policy.available
    taken = policy.taken & topology.online
    claimed = CPUSet().union(
        *(
            a.exclusive
            for a in policy.admitted.values()
            if a.request.source == CLAIM_SOURCE and a.kind == "held"
        )
    )
    idle = CPUSet() if policy.reserved_shared else topology.isolated - reserved - taken
    idle = idle & available
    shared = available - reserved - taken - idle
    # (shared CPUs of the container, milli-CPU granted) for every container with a grant
    grants: list[tuple[CPUSet, int]] = []
    memory: dict[int, int] = dict.fromkeys(topology.nodes, 0)
    for key, entry in policy.admitted.items():
        placement = policy.placement(key)
        if entry.shared_milli and placement.cpus:
            grants.append((placement.cpus - placement.exclusive, entry.shared_milli))
        amount = entry.request.memory_limit or entry.request.memory_request
        if amount and placement.mems:
            for node_id, part in split_memory(topology, amount, placement.mems).items():
                memory[node_id] += part

    def use(cpus: CPUSet) -> CpuUse:
        granted = sum(milli for where, milli in grants if where and where <= cpus)
        open_cpus = len(cpus & shared) + len(cpus & idle)
        return CpuUse(
            reserved=len(cpus & reserved),
            shared=len(cpus & shared),
            exclusive=len(cpus & (taken - claimed)),
            claimed=len(cpus & taken & claimed),
            isolated=len(cpus & idle),
            free=max(0, open_cpus - math.ceil(granted / 1000)),
        )

    nodes = []
    for node in topology.nodes.values():
        sockets = sorted(topology.sockets_of_cpus(node.cpus))
        nodes.append(
            NodeUsage(
                node=node.id,
                socket=sockets[0] if sockets else None,
                cpus=node.cpus,
                cpu=use(node.cpus),
                cpu_allocatable=len(node.cpus & (available - reserved)),
                memory_capacity=node.memory_bytes,
                memory_available=node.memory_bytes - memory[node.id],
                distances=tuple(sorted(node.distances.items())),
            )
        )
    pool_sets = [(p.name, p.cpus) for p in policy.pools()] or [("root", available)]
    pools = tuple(PoolUsage(name, cpus, use(cpus)) for name, cpus in pool_sets)
    return Usage(policy=policy.name, nodes=tuple(nodes), pools=pools)


def socket_totals(nodes: Iterable[NodeUsage]) -> dict[int, list[NodeUsage]]:
    """The NUMA nodes of each socket (memory-only nodes belong to none)."""
    out: dict[int, list[NodeUsage]] = {}
    for node in nodes:
        if node.socket is not None:
            out.setdefault(node.socket, []).append(node)
    return dict(sorted(out.items()))
