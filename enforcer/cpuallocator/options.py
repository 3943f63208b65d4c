"""kubelet's CPU manager policy options, applied to one exclusive allocation.

The guarantees are kubelet's (docs/policies.md has the table); the algorithms are ours:

- `full_pcpus_only` (full-pcpus-only): CPUs only as whole physical cores. The request must be a
  multiple of the machine's threads per core (kubelet: CPUs / cores) and is served from cores
  whose every thread is free; otherwise `SMTAlignmentError`, as kubelet's.
- `distribute_across_numa` (distribute-cpus-across-numa): a request that needs more than one
  NUMA node is split evenly over the fewest nodes that can each hold an even share (in groups of
  a core's threads with `full_pcpus_only`, else of single CPUs); of the node sets that can, the
  one spanning the fewest sockets, then the one leaving the free CPUs of all nodes most even
  (kubelet's balance score: the standard deviation), then the lowest node ids. The remainder
  goes one group at a time to the nodes of the share, chosen the same way.
- `distribute_across_cores` (distribute-cpus-across-cores): one thread per physical core while
  there are free cores; idle cores before busy ones; a second thread of a core only when every
  core of the scope has given one. Best effort, as kubelet's.
- `align_by_socket` (align-by-socket): never across sockets while one socket's free CPUs can
  hold the request (the fullest such socket; ties: the lowest id).
- `prefer_uncore_cache` (prefer-align-cpus-by-uncorecache): all CPUs from one L3 (uncore)
  cache group when one has room (the fullest that does); otherwise from as few groups as can
  hold them: whole groups, most free first, the rest from the group that fits it best.

Pure and deterministic, like the allocator.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from enforcer.cpuallocator.allocator import NotEnoughCPUs, allocate_cpus
from enforcer.topology import CPUSet, Topology
from enforcer.topology.model import Level

_MAX_COMBINATIONS = 20_000  # NUMA node sets tried per size; a 16-node machine has 12,870 of 8


@dataclass(frozen=True)
class CPUOptions:
    full_pcpus_only: bool = False
    distribute_across_numa: bool = False
    distribute_across_cores: bool = False
    align_by_socket: bool = False
    prefer_uncore_cache: bool = False


NO_OPTIONS = CPUOptions()


class SMTAlignmentError(NotEnoughCPUs):
    """kubelet's SMTAlignmentError: full-pcpus-only cannot be honoured for this request."""

    def __init__(self, requested: int, per_core: int, free: CPUSet, whole: int | None) -> None:
        super().__init__(requested, free)
        self.per_core = per_core
        self.whole = whole
        self.odd = whole is None
        if whole is None:
            text = (
                f"SMTAlignmentError: fullPCPUsOnly (kubelet's full-pcpus-only) gives exclusive "
                f"CPUs as whole cores only: {requested} CPUs is not a multiple of the "
                f"{per_core} threads of a core"
            )
        else:
            text = (
                f"SMTAlignmentError: fullPCPUsOnly (kubelet's full-pcpus-only): not enough free "
                f"whole cores: asked for {requested} CPUs, {whole} free as whole cores of "
                f"{per_core} threads"
            )
        self.args = (text,)


def cpus_per_core(topology: Topology) -> int:
    """Threads per core as kubelet counts them: online CPUs // cores, at least 1."""
    cores = len(topology.cores())
    return max(1, len(topology.online) // cores) if cores else 1


def whole_cores(topology: Topology, free: CPUSet) -> CPUSet:
    """The CPUs of the cores whose every thread is in `free`."""
    return CPUSet().union(*(c for c in topology.cores() if c <= free))


def usable(topology: Topology, free: CPUSet, options: CPUOptions) -> CPUSet:
    """The CPUs of `free` an exclusive allocation may come from under `options`."""
    return whole_cores(topology, free) if options.full_pcpus_only else free


def check_request(topology: Topology, count: int, options: CPUOptions) -> None:
    """SMTAlignmentError when full-pcpus-only refuses `count` CPUs whatever is free."""
    per_core = cpus_per_core(topology)
    if options.full_pcpus_only and count % per_core:
        raise SMTAlignmentError(count, per_core, CPUSet(), None)


def take_cpus(topology: Topology, free: Iterable[int], count: int, options: CPUOptions) -> CPUSet:
    """`count` CPUs out of `free` under `options` (the allocator's packing when none is set).
    NotEnoughCPUs (SMTAlignmentError under full-pcpus-only) when they do not fit."""
    free_set = CPUSet(free)
    if options == NO_OPTIONS:
        return allocate_cpus(topology, free_set, count)
    check_request(topology, count, options)
    candidates = usable(topology, free_set, options)
    if count > len(candidates):
        if options.full_pcpus_only:
            raise SMTAlignmentError(count, cpus_per_core(topology), free_set, len(candidates))
        raise NotEnoughCPUs(count, free_set)
    if count <= 0:
        return CPUSet()
    if options.align_by_socket and not _finer_unit_holds(topology, candidates, count, options):
        candidates = _one_unit(topology, "socket", candidates, count)
    group = cpus_per_core(topology) if options.full_pcpus_only else 1
    if options.distribute_across_numa:
        taken = _across_numa(topology, candidates, count, group)
    elif options.distribute_across_cores:
        taken = _across_cores(topology, candidates, count)
    elif options.prefer_uncore_cache:
        taken = _by_uncore_cache(topology, candidates, count)
    else:
        taken = allocate_cpus(topology, candidates, count)
    if options.full_pcpus_only and whole_cores(topology, taken) != taken:
        # Never a silent wrong pinning: a split core is a refusal, not a placement.
        raise SMTAlignmentError(count, group, free_set, len(candidates))
    return taken


def _finer_unit_holds(topology: Topology, free: CPUSet, count: int, options: CPUOptions) -> bool:
    """Whether a unit inside one socket that the other options pack into (a NUMA node under
    distribute-across-numa, an uncore cache under prefer-align-by-uncorecache) holds `count`
    free CPUs anywhere: that unit already aligns by socket, so the socket is not chosen first
    (the fullest socket may hold the request only across its nodes or caches)."""
    levels: list[Level] = []
    if options.distribute_across_numa:
        levels.append("node")
    if options.prefer_uncore_cache:
        levels.append("l3")
    return any(
        len(cpus & free) >= count for level in levels for cpus in topology.units(level).values()
    )


def _one_unit(topology: Topology, level: Level, free: CPUSet, count: int) -> CPUSet:
    """The free CPUs of the fullest unit of `level` that holds `count` of them, or `free`."""
    fits = [
        (len(part), key, part)
        for key, cpus in sorted(topology.units(level).items())
        if len(part := cpus & free) >= count
    ]
    return min(fits, key=lambda f: (f[0], f[1]))[2] if fits else free


# ----- distribute-cpus-across-numa ---------------------------------------------------------


def _across_numa(topology: Topology, free: CPUSet, count: int, group: int) -> CPUSet:
    nodes = [n for n in topology.cpu_nodes() if topology.cpus_of_node(n) & free]
    avail = {n: len(topology.cpus_of_node(n) & free) for n in nodes}
    if any(a >= count for a in avail.values()):
        # One node holds it: no distribution (kubelet packs it in one node).
        return allocate_cpus(topology, _one_unit(topology, "node", free, count), count)
    for k in range(2, len(nodes) + 1):
        best: tuple[tuple[float, ...], tuple[int, ...], dict[int, int]] | None = None
        for combo in itertools.islice(itertools.combinations(nodes, k), _MAX_COMBINATIONS):
            shares = _shares(avail, combo, count, group)
            if shares is None:
                continue
            after = [avail[n] - shares.get(n, 0) for n in nodes]
            sockets = len({topology.cpus[min(topology.cpus_of_node(n))].socket for n in combo})
            key = (float(sockets), statistics.pstdev(after), *map(float, combo))
            if best is None or key < best[0]:
                best = (key, combo, shares)
        if best is not None:
            taken = CPUSet()
            for node, share in sorted(best[2].items()):
                part = topology.cpus_of_node(node) & free
                taken |= allocate_cpus(topology, part, share)
            return taken
    return allocate_cpus(topology, free, count)  # no even split: packed, as kubelet falls back


def _shares(
    avail: dict[int, int], combo: Sequence[int], count: int, group: int
) -> dict[int, int] | None:
    """CPUs per node of `combo` for an even split of `count` in groups of `group` (`count` is
    a multiple of `group`); None when the nodes cannot hold it."""
    if sum((avail[n] // group) * group for n in combo) < count:
        return None
    even = (count // len(combo) // group) * group
    if any(avail[n] < even for n in combo):
        return None
    shares = dict.fromkeys(combo, even)
    remainder = count - even * len(combo)
    # The remainder, one group per node at most (so no two nodes differ by more than a
    # group), to the nodes with the most left: that keeps the free CPUs most even.
    room = [n for n in combo if avail[n] - even >= group]
    room.sort(key=lambda n: (even - avail[n], n))
    if len(room) * group < remainder:
        return None
    for node in room:
        if remainder <= 0:
            break
        shares[node] += group
        remainder -= group
    return shares


# ----- distribute-cpus-across-cores --------------------------------------------------------


def _across_cores(topology: Topology, free: CPUSet, count: int) -> CPUSet:
    """One thread per core first, inside the smallest unit with enough free cores."""
    scope = free
    levels: tuple[Level, ...] = ("node", "die", "socket")
    for level in levels:
        fits = [
            (len(part), key, part)
            for key, cpus in sorted(topology.units(level).items())
            if _free_cores(topology, part := cpus & free) >= count
        ]
        if fits:
            scope = min(fits, key=lambda f: (f[0], f[1]))[2]
            break
    cores = [c & scope for c in topology.cores() if c & scope]
    # Idle cores first (no other container's thread beside ours), then by position.
    cores.sort(key=lambda c: (-len(c), min(c)))
    taken: list[int] = []
    depth = 0
    while len(taken) < count:
        for core in cores:
            threads = sorted(core)
            if depth < len(threads) and len(taken) < count:
                taken.append(threads[depth])
        depth += 1
    return CPUSet(taken)


def _free_cores(topology: Topology, cpus: CPUSet) -> int:
    return sum(1 for c in topology.cores() if c & cpus)


# ----- prefer-align-cpus-by-uncorecache -----------------------------------------------------


def _by_uncore_cache(topology: Topology, free: CPUSet, count: int) -> CPUSet:
    groups = [cpus & free for _, cpus in sorted(topology.units("l3").items())]
    groups = [part for part in groups if part]
    if not groups:
        return allocate_cpus(topology, free, count)
    # As few groups as can hold it: while none fits the rest, the group with the most free
    # CPUs whole (ties: the first); then the fullest group that fits the rest.
    taken = CPUSet()
    while True:
        need = count - len(taken)
        fit = [(len(part), i) for i, part in enumerate(groups) if len(part) >= need]
        if fit:
            return taken | allocate_cpus(topology, groups[min(fit)[1]], need)
        _, i = min((-len(part), i) for i, part in enumerate(groups))
        taken |= groups.pop(i)
