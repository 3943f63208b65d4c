"""The one topology-aware CPU allocator shared by the static and topology-aware policies.

Pure and deterministic: the same topology, free CPUs and request give the same answer.

How a request for n CPUs out of `free` is served:

1. Narrow: find the smallest topology unit (socket, die, NUMA node or L3 group) whose free CPUs
   can hold all n with as many whole idle cores as the whole free set could give. Ties go to the
   unit that breaks fewer idle cores, then to the fuller one (best fit, so idle units stay
   whole for later requests), then to the lowest id.
2. Inside that scope n spans several units: take whole idle units, biggest level first
   (sockets, dies, nodes, L3 groups) while they fit, and serve the rest again from step 1.
3. Otherwise take whole idle cores (never split a core while whole idle cores are free),
   filling the units with the most free CPUs first so the set spans as few of them as possible,
   then single threads: near what was taken, threads whose sibling is busy first, and an idle
   core is broken only when nothing else is left.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from enforcer.topology.cpuset import CPUSet
from enforcer.topology.model import Level, Topology

# Bigger units first: whole idle units are taken in this order.
_LEVELS: tuple[Level, ...] = ("socket", "die", "node", "l3")


class NotEnoughCPUs(ValueError):
    """A request asked for more CPUs than are free."""

    def __init__(self, requested: int, free: CPUSet, kind: str = "exclusive") -> None:
        self.requested = requested
        self.free = free
        what = " ".join(filter(None, [str(requested), kind, "CPU" if requested == 1 else "CPUs"]))
        super().__init__(f"asked for {what}, {len(free)} free: {free or 'none'}")


def allocate_cpus(
    topology: Topology,
    available: Iterable[int],
    count: int,
    *,
    prefer: Iterable[int] | None = None,
    kind: str = "exclusive",
) -> CPUSet:
    """Pick `count` CPUs out of `available`, packed along the topology.

    `prefer` (for example the isolated CPUs) is used alone when it holds enough free CPUs for
    the whole request; otherwise it is ignored. `kind` only words the error message.
    Raises NotEnoughCPUs when `count` exceeds what is available, ValueError on a negative
    count or on CPUs that the topology does not know.
    """
    free = CPUSet(available)
    _check(topology, free, count)
    if count > len(free):
        raise NotEnoughCPUs(count, free, kind)
    packer = _Packer(topology)
    if prefer is not None:
        preferred = free & CPUSet(prefer)
        if len(preferred) >= count:
            return packer.take(preferred, count)
    return packer.take(free, count)


def release_cpus(topology: Topology, held: Iterable[int], count: int) -> CPUSet:
    """Which `count` of the `held` CPUs to give back: the ones whose removal leaves the most
    compact set, i.e. the complement of what the allocator would keep out of `held`."""
    held_set = CPUSet(held)
    _check(topology, held_set, count)
    if count > len(held_set):
        raise ValueError(f"cannot release {count} CPUs out of {len(held_set)} held: {held_set}")
    keep = _Packer(topology).take(held_set, len(held_set) - count)
    return held_set - keep


def _check(topology: Topology, cpus: CPUSet, count: int) -> None:
    if count < 0:
        raise ValueError(f"CPU count must not be negative, got {count}")
    unknown = cpus - topology.online
    if unknown:
        raise ValueError(f"CPUs {unknown} are not online CPUs of this machine")


@dataclass(frozen=True)
class _Unit:
    rank: int  # index of the level in _LEVELS: breaks ties between equal units
    key: Any
    cpus: CPUSet

    def sort_key(self) -> tuple[int, Any]:
        return (self.rank, self.key)


# Where a topology keeps what the packer derives from it (the topology never changes).
_DERIVED = "_allocator_derived"


class _Packer:
    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        derived: tuple[list[_Unit], list[CPUSet], list[list[CPUSet]]] | None
        derived = topology.__dict__.get(_DERIVED)
        if derived is None:
            units = _units(topology)
            cores = topology.cores()
            # Each unit's cores, in the order of `cores`: a unit's idle cores are found among
            # its own, not among the machine's (384 cores times 26 units on a 768-CPU server).
            unit_cores = [[c for c in cores if c <= unit.cpus] for unit in units]
            derived = (units, cores, unit_cores)
            topology.__dict__[_DERIVED] = derived  # the dataclass is frozen, its __dict__ not
        self.units: list[_Unit] = derived[0]
        self.cores: list[CPUSet] = derived[1]
        self.unit_cores: list[list[CPUSet]] = derived[2]

    def take(self, free: CPUSet, n: int) -> CPUSet:
        if n <= 0:
            return CPUSet()
        if n >= len(free):
            return free
        scope = self._narrow(free, n)
        if len(scope) == n:
            return scope
        taken = self._take_idle_units(scope, n)
        if taken:
            return taken | self.take(scope - taken, n - len(taken))
        return self._take_cores_and_threads(scope, n)

    # ----- step 1 --------------------------------------------------------------------------

    def _narrow(self, free: CPUSet, n: int) -> CPUSet:
        """The free CPUs of the best single unit that can serve n, or `free` if none can."""
        idle = self._idle_cores(free)
        target = _whole_capacity(idle, n)
        best: tuple[tuple[Any, ...], CPUSet] | None = None
        for unit, cores in zip(self.units, self.unit_cores, strict=True):
            part = unit.cpus & free
            if len(part) < n or part == free:
                continue
            # == [c for c in idle if c <= unit.cpus], the loop run in C
            inside = list(filter(free.issuperset, cores))
            whole = _whole_capacity(inside, n)
            if whole < target:
                continue  # would split cores that another choice keeps whole
            lone = len(part) - sum(map(len, inside))
            breaks = max(0, n - whole - lone)  # threads that must come out of idle cores
            key = (len(unit.cpus), breaks, len(part), unit.sort_key())
            if best is None or key < best[0]:
                best = (key, part)
        return free if best is None else best[1]

    # ----- step 2 --------------------------------------------------------------------------

    def _take_idle_units(self, free: CPUSet, n: int) -> CPUSet:
        for rank in range(len(_LEVELS)):
            taken = CPUSet()
            for unit in self.units:
                if unit.rank != rank:
                    continue
                if len(unit.cpus) <= n - len(taken) and unit.cpus <= free - taken:
                    taken |= unit.cpus
            if taken:
                return taken
        return CPUSet()

    # ----- step 3 --------------------------------------------------------------------------

    def _take_cores_and_threads(self, free: CPUSet, n: int) -> CPUSet:
        info = self.topology.cpus
        counts = self._free_counts(free)

        def spread_key(core: CPUSet) -> tuple[Any, ...]:
            # Biggest cores first (hybrid CPUs), then cores of the units with most free CPUs.
            c = info[min(core)]
            return (
                -len(core),
                -counts["socket"][c.socket],
                c.socket,
                -counts["die"][c.die_key],
                c.die_key,
                -counts["node"][c.node],
                c.node,
                -counts["l3"].get(c.l3, 0),
                -1 if c.l3 is None else c.l3,
                c.core,
            )

        taken: set[int] = set()
        for core in sorted(self._idle_cores(free), key=spread_key):
            if len(core) <= n - len(taken):
                taken |= core
                if len(taken) == n:
                    return CPUSet(taken)
        while len(taken) < n:
            rest = free - taken
            near = _Near.of(self.topology, taken)
            taken.add(min(rest, key=lambda cpu: near.thread_key(cpu, rest)))
        return CPUSet(taken)

    # ----- helpers -------------------------------------------------------------------------

    def _idle_cores(self, free: CPUSet) -> list[CPUSet]:
        return list(filter(free.issuperset, self.cores))  # cores wholly free, in order

    def _free_counts(self, free: CPUSet) -> dict[str, dict[Any, int]]:
        return {
            level: {key: len(cpus & free) for key, cpus in self.topology.units(level).items()}
            for level in _LEVELS
        }


@dataclass(frozen=True)
class _Near:
    """The units that already hold taken CPUs, to keep further threads close to them."""

    topology: Topology
    sockets: frozenset[int]
    dies: frozenset[tuple[int, int]]
    nodes: frozenset[int]
    l3s: frozenset[int | None]

    @classmethod
    def of(cls, topology: Topology, taken: set[int]) -> _Near:
        infos = [topology.cpus[t] for t in taken]
        return cls(
            topology,
            frozenset(c.socket for c in infos),
            frozenset(c.die_key for c in infos),
            frozenset(c.node for c in infos),
            frozenset(c.l3 for c in infos),
        )

    def thread_key(self, cpu: int, rest: CPUSet) -> tuple[Any, ...]:
        c = self.topology.cpus[cpu]
        first = not self.sockets  # nothing taken yet: every CPU is equally near
        return (
            # stay close to what is already taken ...
            not first and c.socket not in self.sockets,
            not first and c.die_key not in self.dies,
            not first and c.node not in self.nodes,
            # ... use threads whose siblings are busy before breaking an idle core ...
            len(self.topology.siblings(cpu) & rest),
            not first and c.l3 not in self.l3s,
            # ... and be deterministic.
            cpu,
        )


def _units(topology: Topology) -> list[_Unit]:
    """Every socket, die, node and L3 group once: a unit equal to a bigger one is dropped."""
    seen: set[CPUSet] = set()
    units: list[_Unit] = []
    for rank, level in enumerate(_LEVELS):
        for key, cpus in sorted(topology.units(level).items()):
            if cpus not in seen:
                seen.add(cpus)
                units.append(_Unit(rank, key, cpus))
    return units


def _whole_capacity(cores: list[CPUSet], n: int) -> int:
    """How many of n CPUs whole cores out of `cores` can supply (biggest cores first)."""
    # The greedy pass over the sizes in descending order, size by size: of k cores of one size,
    # as many as still fit are taken (what taking them one at a time would do).
    total = 0
    for size, count in sorted(Counter(map(len, cores)).items(), reverse=True):
        if size:
            total += size * min(count, (n - total) // size)
    return total
