"""Policy `topology-aware`: every container goes to the tightest pool of a tree that mirrors
the hardware (root, sockets, dies, NUMA nodes), with its CPUs and memory nodes aligned.

Eligibility (first match wins):

- `cpu.preserve`: the CPUs kubelet asked for, cut to the root's shared CPUs (plus the reserved
  CPUs for a container that may have them, see below); memory nodes left as kubelet set them.
  Refused when the cut leaves nothing; when others later take every CPU of the cut, it runs on
  all the root's shared CPUs, and on the reserved CPUs while the root has none left (as the
  root's BestEffort containers do), never on CPUs another container holds.
- A pod in `reservedNamespaces`, or `prefer-reserved-cpus: "true"` (the annotation overrides the
  namespace either way): runs on the reserved CPUs. Without reserved CPUs, the rules below apply.
- Guaranteed with an integer request: exclusive CPUs; a 1-CPU one takes an isolated CPU when it
  prefers them (`prefer-isolated-cpus`, default `preferIsolatedCPUs`) and one is free.
- Guaranteed above 1 CPU with a fraction: "mixed", the integer part exclusive and the fraction on
  the pool's shared CPUs.
- Either of those with `prefer-shared-cpus` (default `preferSharedCPUs`, which yields to an
  explicit `prefer-isolated-cpus: "true"`): shared, the whole request granted.
- Everything else (Burstable, BestEffort, Guaranteed below 1 CPU): shared, its CPU request
  granted against the pool's shared capacity.

Accounting, per pool P (P "or below" = P and its descendants):

- shared(P) = P's CPUs - reserved - isolated - exclusively held: where its shared containers run.
- granted(P) = milli-CPU granted to shared and mixed containers placed in P or below; these need
  required(P) = ceil(granted / 1000) CPUs of shared(P), at least one when any such container
  exists. Without reserved CPUs the root always keeps one so that BestEffort containers can
  start; with reserved CPUs it need not: its containers with nothing granted (BestEffort, or no
  CPU request) run on the reserved CPUs while it has no shared CPU left, as with kubelet and
  `static` (so a 2-CPU machine with 1 reserved CPU can still grant the other one). Exclusive
  CPUs are only taken where every pool that loses them keeps its required CPUs. For a tree of
  pools this condition is exactly what makes every shared grant satisfiable at the same time.
- Memory is charged per NUMA node (the limit, or the request when there is no limit), split over
  the container's memory nodes in proportion to their size. A pool's capacity is the memory of
  its nodes plus the memory-only nodes attached to them. Only the root may be overcommitted:
  kubelet already admitted the pod, and Burstable limits legitimately add up to more than the
  machine has.

kubelet's CPU manager options (`fullPCPUsOnly` and the others, `kubelet_options`) shape the
exclusive CPUs: which candidates count, which pool serves first, how the CPUs are taken.

Deterministic: the same topology, configuration and sequence of calls give the same answers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from enforcer.cpuallocator import (
    NotEnoughCPUs,
    SMTAlignmentError,
    allocate_cpus,
    cpus_per_core,
    release_cpus,
    take_cpus,
    usable,
)
from enforcer.decode import ContainerRequest
from enforcer.policy import kubelet_options as kopts
from enforcer.policy.base import Policy
from enforcer.policy.device_locality import close_cpus
from enforcer.policy.model import Admitted, Placement, PlacementError, PoolView
from enforcer.policy.pool_math import closeness, format_bytes, split_memory, whole_cores_count
from enforcer.topology import CPUSet, Topology
from resource_contract.affinity import Subject, weight_towards
from resource_contract.config import PolicyConfig

_EMPTY = CPUSet()
ROOT = "root"
_MEMS_CACHE_LIMIT = 4096


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


Kind = Literal["preserved", "reserved", "exclusive", "mixed", "shared"]


@dataclass(frozen=True)
class Need:
    """What a container is eligible for under the rules and preferences."""

    kind: Kind
    exclusive: int = 0  # whole CPUs of its own
    milli: int = 0  # CPU granted on shared CPUs
    isolated: bool = False  # a 1-CPU exclusive container that prefers an isolated CPU
    memory: int = 0  # bytes: the limit, or the request when there is no limit

    @property
    def shares(self) -> bool:
        return self.kind in ("shared", "mixed")

    def describe(self) -> str:
        parts = []
        if self.exclusive:
            parts.append(f"{self.exclusive} exclusive CPU{'s' if self.exclusive > 1 else ''}")
        if self.shares:
            parts.append(f"{self.milli}m shared CPU")
        text = " + ".join(parts)
        return f"{text} and {format_bytes(self.memory)} memory" if self.memory else text


class TopologyAwarePolicy(Policy):
    name = "topology-aware"
    reserved_shared = False

    def __init__(self, topology: Topology, config: PolicyConfig) -> None:
        super().__init__(topology, config)
        kopts.check_machine(topology, config)
        self.cpu_options = kopts.cpu_options(config)
        self._pools = build_pool_tree(topology, self.available, self.reserved)
        self._by_name = {p.name: p for p in self._pools}
        depths = sorted({p.depth for p in self._pools}, reverse=True)
        # Deepest (tightest) level first: the search stops at the first level that serves.
        self._levels = [[p for p in self._pools if p.depth == d] for d in depths]
        self._leaf = {cpu: p.index for p in self._pools for cpu in p.cpus}  # deepest wins
        self._closeness = [[closeness(a, b, self._pools) for b in self._pools] for a in self._pools]
        self._reserved_mems = topology.memory_nodes_of_cpus(self.reserved)
        n = len(self._pools)
        self._taken = _EMPTY
        self._granted = [0] * n  # milli-CPU granted in the pool or below
        self._sharing = [0] * n  # containers with a shared part in the pool or below
        self._members = [0] * n  # containers placed in the pool or below
        self._used: dict[int, int] = dict.fromkeys(topology.nodes, 0)
        self._charges: dict[str, dict[int, int]] = {}
        self._pods: dict[str, dict[str, int]] = {}  # pod uid -> key -> pool index
        # Caches: placement() runs for every live container after every change.
        self._shared_cache: dict[int, CPUSet] = {}
        self._placement_cache: dict[str, Placement] = {}
        self._mems_cache: dict[CPUSet, CPUSet] = {}

    # ----- the Policy interface ------------------------------------------------------------

    @property
    def taken(self) -> CPUSet:
        return self._taken

    def admit(self, request: ContainerRequest, *, keep: CPUSet | None = None) -> Placement:
        previous = self.release(request.key)
        try:
            entry = self._decide(request, keep=keep, hint=None, previous=previous)
        except PlacementError:
            if previous is not None:
                self._add(previous)  # a refusal changes nothing
            raise
        assert entry is not None
        self._add(entry)
        return self.placement(request.key)

    def release(self, key: str) -> Admitted | None:
        entry = self.admitted.pop(key, None)
        if entry is not None:
            self._remove(entry)
        return entry

    def reinstate(self, entry: Admitted) -> None:
        self.release(entry.request.key)
        self._add(entry)

    def placement(self, key: str) -> Placement:
        cached = self._placement_cache.get(key)
        if cached is not None:
            return cached
        entry = self.admitted[key]
        kind = entry.kind
        if kind == "preserved":
            cpus = self.preserved_cpus(entry.request)
            placement = Placement(cpus, None, _EMPTY, "preserved", "none")
        elif kind == "reserved":
            placement = Placement(
                self.reserved, self._pinned(self.reserved), _EMPTY, "reserved", "reserved"
            )
        elif kind in ("exclusive", "held"):
            cpus = entry.exclusive
            placement = Placement(cpus, self._pinned(cpus), cpus, kind, entry.pool)
        else:
            index = self._by_name[entry.pool].index
            if entry.exclusive:
                cpus = self._shared(index) | entry.exclusive
            else:
                cpus = self._shared_or_fallback(index)
            placement = Placement(cpus, self._pinned(cpus), entry.exclusive, kind, entry.pool)
        self._placement_cache[key] = placement
        return placement

    def restore(self, state: Mapping[str, Any]) -> list[str]:
        """Re-admits a saved state: first every container that can stay where it was (its
        exclusive CPUs still free and valid, its pool still there with room), then the others,
        placed anew. Returns one message per container that could not be placed at all."""
        problems: list[str] = []
        entries: list[Admitted] = []
        for i, data in enumerate(state.get("admitted", [])):
            try:
                entries.append(Admitted.from_dict(data))
            except (KeyError, TypeError, ValueError) as exc:
                problems.append(f"saved entry {i}: unreadable: {exc}")
        moving = []
        for entry in entries:
            self.release(entry.request.key)
            stayed = self._decide(
                entry.request, keep=entry.exclusive or None, hint=entry.pool, strict=True
            )
            if stayed is None:
                moving.append(entry)
            else:
                self._add(stayed)
        for entry in moving:
            req = entry.request
            try:
                self.admit(req)
            except PlacementError as exc:
                problems.append(f"{req.namespace}/{req.pod_name}/{req.container}: {exc}")
        # Keep the saved order, so that the next saved state reads like this one.
        order = {e.request.key: i for i, e in enumerate(entries)}
        self.admitted = dict(
            sorted(self.admitted.items(), key=lambda kv: order.get(kv[0], len(order)))
        )
        return problems

    def cpu_classes(self) -> dict[int, str]:
        """CPU -> the CPU class its container's annotation asks for: a container's exclusive
        CPUs only (shared CPUs serve many containers, which asked for nothing or for others)."""
        out: dict[int, str] = {}
        for entry in self.admitted.values():
            if entry.request.cpu_class is not None:
                out.update(dict.fromkeys(entry.exclusive, entry.request.cpu_class))
        return out

    def cpu_class_ignored(self, key: str) -> str | None:
        entry = self.admitted.get(key)
        if entry is None or entry.request.cpu_class is None or entry.exclusive:
            return None
        return (
            f"CPU class {entry.request.cpu_class} is not applied: the container has no "
            f"exclusive CPUs (it runs {entry.kind}); a CPU class applies to exclusive CPUs only"
        )

    def pools(self) -> list[PoolView]:
        views = []
        for p in self._pools:
            views.append(
                PoolView(
                    name=p.name,
                    depth=p.depth,
                    cpus=p.cpus,
                    shared=self._shared(p.index),
                    exclusive=p.cpus & self._taken,
                    free=self._exclusive_room(p) + len(p.isolated - self._taken),
                    shared_milli=self._granted[p.index],
                    containers=self._members[p.index],
                    mems=p.mems,
                    memory_capacity=p.memory_capacity,
                    memory_used=self._memory_used(p),
                )
            )
        return views

    def pool_names(self) -> list[str]:
        return [p.name for p in self._pools]

    # ----- eligibility ---------------------------------------------------------------------

    def need(self, request: ContainerRequest) -> Need:
        """What `request` is eligible for (see the module's docstring)."""
        prefs = request.preferences
        memory = request.memory_limit or request.memory_request
        milli = request.shared_milli
        if prefs.preserve:
            return Need("preserved")
        if self._wants_reserved(request) and self.reserved:
            if (
                self.config.strictCPUReservation
                and request.namespace not in self.config.reservedNamespaces
            ):
                raise kopts.strict_refusal(request)
            return Need("reserved", milli=milli, memory=memory)
        prefer_shared = prefs.shared
        if prefer_shared is None:
            # The configured default yields to an explicit request for an isolated CPU.
            prefer_shared = self.config.preferSharedCPUs and not prefs.isolated
        if not request.exclusive_eligible or milli < 1000 or prefer_shared:
            return Need("shared", milli=milli, memory=memory)
        whole, fraction = divmod(milli, 1000)
        if fraction and self.cpu_options.full_pcpus_only and whole % cpus_per_core(self.topology):
            return Need("shared", milli=milli, memory=memory)  # kubelet: fractional is shared
        if fraction:
            return Need("mixed", exclusive=whole, milli=fraction, memory=memory)
        isolated = prefs.isolated
        if isolated is None:
            isolated = self.config.preferIsolatedCPUs
        return Need("exclusive", exclusive=whole, isolated=whole == 1 and isolated, memory=memory)

    def _wants_reserved(self, request: ContainerRequest) -> bool:
        """A pod of `reservedNamespaces`, or `prefer-reserved-cpus` (either way)."""
        reserved = request.preferences.reserved
        if reserved is None:
            return request.namespace in self.config.reservedNamespaces
        return reserved

    def preserve_allowed(self, request: ContainerRequest) -> CPUSet:
        # Where the root's containers with nothing granted run (its shared CPUs: neither
        # reserved, isolated nor exclusively held; the reserved CPUs while it has none left),
        # plus the reserved CPUs for a container that would run on them without `cpu.preserve`.
        reserved = self.reserved - kopts.strict_reserved(self.config, self.reserved, request)
        shared = self._shared(0) or reserved
        return shared | reserved if self._wants_reserved(request) else shared

    # ----- deciding ------------------------------------------------------------------------

    def _decide(
        self,
        request: ContainerRequest,
        *,
        keep: CPUSet | None,
        hint: str | None,
        previous: Admitted | None = None,
        strict: bool = False,
    ) -> Admitted | None:
        """The entry for `request`: where it was (`keep`/`hint`, else its previous entry) when
        that is still valid, else a new place. `strict`: None instead of a new place."""
        need = self.need(request)
        if need.kind == "preserved":
            try:
                self.preserved_cut(request)
            except PlacementError:
                if strict:
                    return None
                raise
            return Admitted(request, "preserved", pool="none")
        if need.kind == "reserved":
            return Admitted(request, "reserved", pool="reserved", shared_milli=need.milli)
        tries = [(keep, hint)]
        if previous is not None:
            tries.append((previous.exclusive or None, previous.pool))
        for cpus, pool in tries:
            if cpus or pool:
                entry = self._stay(request, need, cpus, pool)
                if entry is not None:
                    return entry
        if strict:
            return None
        return self._search(request, need)

    def _stay(
        self, request: ContainerRequest, need: Need, keep: CPUSet | None, hint: str | None
    ) -> Admitted | None:
        pool = self._by_name.get(hint) if hint else None
        exclusive = _EMPTY
        if need.exclusive:
            # The exclusive part stays only on exactly as many CPUs as it asks for.
            if not keep or len(keep) != need.exclusive:
                return None
            exclusive = keep
            if pool is None or not exclusive <= pool.cpus:
                pool = self._tightest(exclusive)
        elif pool is None and keep and not keep & (self.reserved | self.topology.isolated):
            # Where a shared container ran, unless that was kubelet's default (every CPU).
            pool = self._tightest(keep)
        if pool is None or not self._valid(pool, need, exclusive):
            return None
        return self._entry(request, need, pool, exclusive)

    def _tightest(self, cpus: CPUSet) -> Pool | None:
        """The deepest pool holding all of `cpus`."""
        if not cpus or not cpus <= self.available:
            return None
        leaves = {self._leaf[c] for c in cpus}
        common = set(self._pools[leaves.pop()].chain)
        for leaf in leaves:
            common &= set(self._pools[leaf].chain)
        return max((self._pools[i] for i in common), key=lambda p: p.depth)

    def _valid(self, pool: Pool, need: Need, exclusive: CPUSet) -> bool:
        """Whether `need` may take `exclusive` in `pool` without breaking any pool's grants."""
        if not self._memory_fits(pool, need.memory):
            return False
        touched: set[int] = set(pool.chain)
        if exclusive:
            free_isolated = pool.isolated - self._taken
            if need.isolated and exclusive <= free_isolated:
                exclusive = _EMPTY  # isolated CPUs are nobody's shared CPUs
            elif not exclusive <= self._shared(pool.index):
                return False
            for cpu in exclusive:
                touched.update(self._pools[self._leaf[cpu]].chain)
        for q in touched:
            lose = len(exclusive & self._pools[q].cpus) if exclusive else 0
            extra = need.shares and q in pool.chain
            required = self._required(q, need.milli if extra else 0, 1 if extra else 0)
            if len(self._shared(q)) - lose < required:
                return False
        return True

    def _search(self, request: ContainerRequest, need: Need) -> Admitted:
        siblings = self._attraction(request)
        kopts.check_whole(self.topology, request, need.exclusive, self.cpu_options)
        if need.isolated:
            found = self._search_isolated(need, siblings)
            if found is not None:
                pool, cpus = found
                return self._entry(request, need, pool, cpus)
        if need.exclusive:
            if (near := self._close_to_devices(request, need)) is not None:
                return near
            try:
                found = self._search_exclusive(need, siblings)
                if found is not None:
                    pool, candidates = found
                    cpus = take_cpus(self.topology, candidates, need.exclusive, self.cpu_options)
                    return self._entry(request, need, pool, cpus)
            except SMTAlignmentError as exc:
                raise kopts.smt_refusal(request, exc) from None
        else:
            shared = self._search_shared(need, siblings)
            if shared is not None:
                return self._entry(request, need, shared, _EMPTY)
        raise self._refusal(request, need)

    def _close_to_devices(self, request: ContainerRequest, need: Need) -> Admitted | None:
        """policy.preferCloseToDevices: the exclusive CPUs in the tightest pool on the devices'
        NUMA node(s) when they fit there (device_locality); None for the normal search."""
        if not self.config.preferCloseToDevices or not request.devices:
            self._note_devices(request.key, None)
            return None
        root = self._pools[0]
        close = close_cpus(
            self.topology, self.config, request, self._candidates(root), need.exclusive
        )
        self._note_devices(request.key, close.note)
        pool = self._tightest(close.cpus) if close.cpus is not None else None
        if pool is None or close.cpus is None:
            return None
        try:
            cpus = take_cpus(
                self.topology, self._candidates(pool) & close.cpus, need.exclusive, self.cpu_options
            )
        except (NotEnoughCPUs, SMTAlignmentError) as exc:
            cpus, why = _EMPTY, str(exc)
        else:
            why = "it would break another container's grant or memory"
        if cpus and self._valid(pool, need, cpus):
            return self._entry(request, need, pool, cpus)
        self._note_devices(request.key, f"{close.note}: not there ({why}): normal placement")
        return None

    def _search_isolated(
        self, need: Need, siblings: Sequence[tuple[int, int]]
    ) -> tuple[Pool, CPUSet] | None:
        best: tuple[tuple[int, ...], Pool, CPUSet] | None = None
        for level in self._levels:
            for pool in level:
                free = pool.isolated - self._taken
                if not free or not self._memory_fits(pool, need.memory):
                    continue
                key = (
                    -self._affinity(pool, siblings),
                    -len(free),
                    self._members[pool.index],
                    pool.index,
                )
                if best is None or key < best[0]:
                    best = (key, pool, free)
            if best is not None:
                break
        if best is None:
            return None
        return best[1], allocate_cpus(self.topology, best[2], 1)

    def _search_exclusive(
        self, need: Need, siblings: Sequence[tuple[int, int]]
    ) -> tuple[Pool, CPUSet] | None:
        n = need.exclusive
        extra_count = 1 if need.shares else 0
        # No pool can give more whole cores than the whole machine: once a pool gives that
        # many, shallower (looser) pools cannot beat it.
        ideal = self._fit(self._pools[0], self._shared(0), n)
        best: tuple[tuple[int, ...], Pool, CPUSet, int] | None = None
        for level in self._levels:
            for pool in level:
                if not self._memory_fits(pool, need.memory):
                    continue
                if any(
                    len(self._shared(q)) - n < self._required(q, need.milli, extra_count)
                    for q in pool.chain
                ):
                    continue
                candidates = self._candidates(pool)
                if len(candidates) < n:
                    continue
                whole = self._fit(pool, candidates, n)
                key = (
                    -whole,  # never split a core while a pool offers whole ones
                    -pool.depth,
                    -self._affinity(pool, siblings),
                    -len(candidates),  # least loaded
                    self._members[pool.index],
                    -self._memory_free(pool),
                    pool.index,
                )
                if best is None or key < best[0]:
                    best = (key, pool, candidates, whole)
            # alignBySocket: within one socket while one can take it, split cores or not.
            if best is not None and (best[3] >= ideal or self._aligned(best[1])):
                break
        return None if best is None else (best[1], best[2])

    def _fit(self, pool: Pool, candidates: CPUSet, n: int) -> int:
        """How well `candidates` serve n CPUs: whole cores, or distinct cores to spread on."""
        if self.cpu_options.distribute_across_cores:
            return kopts.spread_capacity(self.topology, candidates, n)
        return whole_cores_count(pool.cores, candidates, n)

    def _aligned(self, pool: Pool) -> bool:
        """alignBySocket: a pool within one socket; preferAlignCPUsByUncoreCache: within one
        L3 group. Such a pool serves before looser ones, split cores or not."""
        return kopts.aligned(self.topology, self.cpu_options, pool.cpus)

    def _search_shared(self, need: Need, siblings: Sequence[tuple[int, int]]) -> Pool | None:
        best: tuple[tuple[int, ...], Pool] | None = None
        for level in self._levels:
            for pool in level:
                if not self._memory_fits(pool, need.memory):
                    continue
                if any(len(self._shared(q)) < self._required(q, need.milli, 1) for q in pool.chain):
                    continue
                key = (
                    -self._affinity(pool, siblings),
                    -(len(self._shared(pool.index)) * 1000 - self._granted[pool.index]),
                    self._members[pool.index],
                    -self._memory_free(pool),
                    pool.index,
                )
                if best is None or key < best[0]:
                    best = (key, pool)
            if best is not None:
                break
        return None if best is None else best[1]

    def _refusal(self, request: ContainerRequest, need: Need) -> PlacementError:
        # The best pool: the most room for what was asked, then the tightest.
        def rank(p: Pool) -> tuple[int, ...]:
            shared = self._shared_room(p)
            if need.exclusive:
                return (self._exclusive_room(p), shared, p.depth, -p.index)
            return (shared, p.depth, -p.index)

        best = max(self._pools, key=rank)
        exclusive, shared = self._exclusive_room(best), self._shared_room(best)
        memory = ""
        if best.memory_capacity:
            memory = f" and {format_bytes(self._memory_free(best))} memory"
        return PlacementError(
            f"pod {request.namespace}/{request.pod_name} container {request.container}: "
            f"asked for {need.describe()}; no pool has room: the best, {best.name}, has "
            f"{exclusive} CPU{'' if exclusive == 1 else 's'} free for exclusive use, "
            f"{shared}m shared CPU{memory} free"
            + (" (fullPCPUsOnly: whole cores only)" if self.cpu_options.full_pcpus_only else ""),
            nearest_pool=best.name,
        )

    # ----- capacity ------------------------------------------------------------------------

    def _shared(self, index: int) -> CPUSet:
        cached = self._shared_cache.get(index)
        if cached is None:
            cached = self._shared_cache[index] = self._pools[index].usable - self._taken
        return cached

    def _shared_or_fallback(self, index: int) -> CPUSet:
        """Where the pool's containers with no exclusive CPU run: its shared CPUs. Only the root
        can run out of them, and only while nothing is granted on them (`_required`): its
        containers with nothing granted (BestEffort, preserved) then run on the reserved CPUs,
        never on CPUs another container holds."""
        return self._shared(index) or self.reserved

    def _required(self, index: int, milli: int = 0, count: int = 0) -> int:
        """Shared CPUs the pool must keep for what is granted in it and below."""
        granted = self._granted[index] + milli
        required = -(-granted // 1000)
        if required or (index == 0 and self.reserved and not self.config.strictCPUReservation):
            # The root's containers with nothing granted run on the reserved CPUs when no
            # shared CPU is left (see `placement`), as they do under static and kubelet.
            return required
        if self._sharing[index] + count or index == 0:
            required = 1  # a BestEffort container still needs a CPU to run on
        return required

    def _candidates(self, pool: Pool) -> CPUSet:
        """The pool's CPUs that may go exclusive without starving a descendant's grants."""
        shared = self._shared(pool.index)
        protected = self._protected(pool)
        return usable(self.topology, shared - protected if protected else shared, self.cpu_options)

    def _protected(self, pool: Pool) -> CPUSet:
        out = _EMPTY
        for child in pool.children:
            if self._sharing[child]:
                out = out | self._protect(self._pools[child])
        return out

    def _protect(self, pool: Pool) -> CPUSet:
        """CPUs kept back for the shared containers of `pool` and below: those whose loss
        leaves the rest most compact, so exclusive allocations still get whole cores."""
        inner = self._protected(pool)
        missing = self._required(pool.index) - len(inner)
        if missing > 0:
            spare = self._shared(pool.index) - inner
            inner = inner | release_cpus(self.topology, spare, min(missing, len(spare)))
        return inner

    def _exclusive_room(self, pool: Pool) -> int:
        room = len(self._candidates(pool))
        for q in pool.chain:
            room = min(room, len(self._shared(q)) - self._required(q))
        return max(room, 0)

    def _shared_room(self, pool: Pool) -> int:
        return max(0, min(len(self._shared(q)) * 1000 - self._granted[q] for q in pool.chain))

    def _memory_used(self, pool: Pool) -> int:
        return sum(self._used[n] for n in pool.mems)

    def _memory_free(self, pool: Pool) -> int:
        return pool.memory_capacity - self._memory_used(pool)

    def _memory_fits(self, pool: Pool, amount: int) -> bool:
        if pool.index == 0 or not pool.memory_capacity or not amount:
            return True
        return amount <= self._memory_free(pool)

    def _affinity(self, pool: Pool, siblings: Sequence[tuple[int, int]]) -> int:
        """How much `pool` suits the container's affinities: each (pool, weight) pulls
        (positive) or pushes (negative) in proportion to how close the pools are."""
        row = self._closeness[pool.index]
        return sum(weight * row[s] for s, weight in siblings)

    def _attraction(self, request: ContainerRequest) -> list[tuple[int, int]]:
        """(pool index, weight) of the containers request has an affinity for: those its
        affinity annotations name, with their weights; without any, its pod's other
        containers, weight 1 each (containers of a pod stay close)."""
        if not request.affinity:
            pod = self._pods.get(request.pod_uid, {})
            return [(i, 1) for key, i in pod.items() if key != request.key]
        me = subject_of(request)
        out = []
        for key, entry in self.admitted.items():
            pool = self._by_name.get(entry.pool)
            if key == request.key or pool is None:
                continue
            weight = weight_towards(request.affinity, me, subject_of(entry.request))
            if weight:
                out.append((pool.index, weight))
        return out

    # ----- bookkeeping ---------------------------------------------------------------------

    def _entry(self, request: ContainerRequest, need: Need, pool: Pool, cpus: CPUSet) -> Admitted:
        kind = need.kind
        return Admitted(request, kind, cpus, pool.name, need.milli if need.shares else 0)

    def _add(self, entry: Admitted) -> None:
        req = entry.request
        key = req.key
        self.admitted[key] = entry
        if entry.exclusive:
            self._taken = self._taken | entry.exclusive
            self._changed_taken()
        pool = self._by_name.get(entry.pool)
        if pool is not None:
            shares = entry.kind in ("shared", "mixed")
            for q in pool.chain:
                self._members[q] += 1
                if shares:
                    self._granted[q] += entry.shared_milli
                    self._sharing[q] += 1
            self._pods.setdefault(req.pod_uid, {})[key] = pool.index
        charges = self._charges_of(entry, pool)
        for node, amount in charges.items():
            self._used[node] += amount
        self._charges[key] = charges
        self._placement_cache.pop(key, None)

    def _remove(self, entry: Admitted) -> None:
        req = entry.request
        key = req.key
        if entry.exclusive:
            self._taken = self._taken - entry.exclusive
            self._changed_taken()
        pool = self._by_name.get(entry.pool)
        if pool is not None:
            shares = entry.kind in ("shared", "mixed")
            for q in pool.chain:
                self._members[q] -= 1
                if shares:
                    self._granted[q] -= entry.shared_milli
                    self._sharing[q] -= 1
            pod = self._pods.get(req.pod_uid, {})
            pod.pop(key, None)
            if not pod:
                self._pods.pop(req.pod_uid, None)
        for node, amount in self._charges.pop(key, {}).items():
            self._used[node] -= amount
        self._placement_cache.pop(key, None)

    def _changed_taken(self) -> None:
        # Every pool's shared CPUs may have changed, and with them every shared placement.
        self._shared_cache.clear()
        self._placement_cache.clear()

    def _charges_of(self, entry: Admitted, pool: Pool | None) -> dict[int, int]:
        amount = entry.request.memory_limit or entry.request.memory_request
        if not amount or entry.kind == "preserved":
            return {}
        if entry.kind == "reserved":
            nodes = self._reserved_mems
        elif entry.kind in ("exclusive", "held"):
            nodes = self._mems_of(entry.exclusive)
        else:
            assert pool is not None
            nodes = pool.mems
        return split_memory(self.topology, amount, nodes)

    def _mems_of(self, cpus: CPUSet) -> CPUSet:
        mems = self._mems_cache.get(cpus)
        if mems is None:
            if len(self._mems_cache) >= _MEMS_CACHE_LIMIT:
                self._mems_cache.clear()
            mems = self._mems_cache[cpus] = self.topology.memory_nodes_of_cpus(cpus)
        return mems

    def _pinned(self, cpus: CPUSet) -> CPUSet | None:
        return self._mems_of(cpus) if self.config.pinMemory and cpus else None


def subject_of(request: ContainerRequest) -> Subject:
    """What affinity rules can ask about a container."""
    return Subject(
        request.container,
        request.namespace,
        request.qos,
        request.pod_name,
        request.pod_uid,
        dict(request.labels),
    )
