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

Accounting per pool (`pool_ledger`): a pool's shared CPUs are its CPUs less the reserved,
isolated and exclusively held ones; exclusive CPUs are only taken where every pool that loses
them keeps the shared CPUs its grants require. For a tree of pools this condition is exactly
what makes every shared grant satisfiable at the same time.

kubelet's CPU manager options (`fullPCPUsOnly` and the others, `kubelet_options`) shape the
exclusive CPUs: which candidates count, which pool serves first, how the CPUs are taken.

Deterministic: the same topology, configuration and sequence of calls give the same answers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from enforcer.cpuallocator import NotEnoughCPUs, SMTAlignmentError, allocate_cpus, take_cpus
from enforcer.decode import ContainerRequest
from enforcer.policy import kubelet_options as kopts
from enforcer.policy.affinity import attraction
from enforcer.policy.base import Policy
from enforcer.policy.device_locality import close_cpus
from enforcer.policy.model import Admitted, Placement, PlacementError, PoolView
from enforcer.policy.need import Need, need_of, wants_reserved
from enforcer.policy.pool_ledger import PoolLedger
from enforcer.policy.pool_math import closeness, whole_cores_count
from enforcer.policy.pool_tree import Pool, build_pool_tree
from enforcer.topology import CPUSet, Topology
from resource_contract.policy_config import PolicyConfig

_EMPTY = CPUSet()


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
        self._ledger = PoolLedger(
            topology,
            self._pools,
            self.reserved,
            self.cpu_options,
            strict_reservation=config.strictCPUReservation,
        )
        # placement() runs for every live container after every change.
        self._placement_cache: dict[str, Placement] = {}
        self._mems_cache: dict[CPUSet, CPUSet] = {}

    # ----- the Policy interface ------------------------------------------------------------

    @property
    def taken(self) -> CPUSet:
        return self._ledger.taken

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
                cpus = self._ledger.shared(index) | entry.exclusive
            else:
                cpus = self._ledger.shared_or_fallback(index)
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
                    shared=self._ledger.shared(p.index),
                    exclusive=p.cpus & self._ledger.taken,
                    free=self._ledger.exclusive_room(p) + len(p.isolated - self._ledger.taken),
                    shared_milli=self._ledger.granted[p.index],
                    containers=self._ledger.members[p.index],
                    mems=p.mems,
                    memory_capacity=p.memory_capacity,
                    memory_used=self._ledger.memory_used(p),
                )
            )
        return views

    def pool_names(self) -> list[str]:
        return [p.name for p in self._pools]

    # ----- eligibility ---------------------------------------------------------------------

    def need(self, request: ContainerRequest) -> Need:
        """What `request` is eligible for (see the module's docstring)."""
        return need_of(request, self.topology, self.config, self.cpu_options, self.reserved)

    def preserve_allowed(self, request: ContainerRequest) -> CPUSet:
        # Where the root's containers with nothing granted run (its shared CPUs: neither
        # reserved, isolated nor exclusively held; the reserved CPUs while it has none left),
        # plus the reserved CPUs for a container that would run on them without `cpu.preserve`.
        reserved = self.reserved - kopts.strict_reserved(self.config, self.reserved, request)
        shared = self._ledger.shared(0) or reserved
        return shared | reserved if wants_reserved(request, self.config) else shared

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
        if not self._ledger.memory_fits(pool, need.memory):
            return False
        touched: set[int] = set(pool.chain)
        if exclusive:
            free_isolated = pool.isolated - self._ledger.taken
            if need.isolated and exclusive <= free_isolated:
                exclusive = _EMPTY  # isolated CPUs are nobody's shared CPUs
            elif not exclusive <= self._ledger.shared(pool.index):
                return False
            for cpu in exclusive:
                touched.update(self._pools[self._leaf[cpu]].chain)
        for q in touched:
            lose = len(exclusive & self._pools[q].cpus) if exclusive else 0
            extra = need.shares and q in pool.chain
            required = self._ledger.required(q, need.milli if extra else 0, 1 if extra else 0)
            if len(self._ledger.shared(q)) - lose < required:
                return False
        return True

    def _search(self, request: ContainerRequest, need: Need) -> Admitted:
        siblings = attraction(
            request, self.admitted, self._ledger.pods.get(request.pod_uid, {}), self._by_name
        )
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
        raise self._ledger.no_room(
            self._pools, request, need, full_pcpus_only=self.cpu_options.full_pcpus_only
        )

    def _close_to_devices(self, request: ContainerRequest, need: Need) -> Admitted | None:
        """policy.preferCloseToDevices: the exclusive CPUs in the tightest pool on the devices'
        NUMA node(s) when they fit there (device_locality); None for the normal search."""
        if not self.config.preferCloseToDevices or not request.devices:
            self._note_devices(request.key, None)
            return None
        candidates = self._ledger.candidates
        close = close_cpus(
            self.topology, self.config, request, candidates(self._pools[0]), need.exclusive
        )
        self._note_devices(request.key, close.note)
        pool = self._tightest(close.cpus) if close.cpus is not None else None
        if pool is None or close.cpus is None:
            return None
        try:
            cpus = take_cpus(
                self.topology, candidates(pool) & close.cpus, need.exclusive, self.cpu_options
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
                free = pool.isolated - self._ledger.taken
                if not free or not self._ledger.memory_fits(pool, need.memory):
                    continue
                key = (
                    -self._affinity(pool, siblings),
                    -len(free),
                    self._ledger.members[pool.index],
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
        ideal = self._fit(self._pools[0], self._ledger.shared(0), n)
        best: tuple[tuple[int, ...], Pool, CPUSet, int] | None = None
        for level in self._levels:
            for pool in level:
                if not self._ledger.memory_fits(pool, need.memory):
                    continue
                if any(
                    len(self._ledger.shared(q)) - n
                    < self._ledger.required(q, need.milli, extra_count)
                    for q in pool.chain
                ):
                    continue
                candidates = self._ledger.candidates(pool)
                if len(candidates) < n:
                    continue
                whole = self._fit(pool, candidates, n)
                key = (
                    -whole,  # never split a core while a pool offers whole ones
                    -pool.depth,
                    -self._affinity(pool, siblings),
                    -len(candidates),  # least loaded
                    self._ledger.members[pool.index],
                    -self._ledger.memory_free(pool),
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
                if not self._ledger.memory_fits(pool, need.memory):
                    continue
                if any(
                    len(self._ledger.shared(q)) < self._ledger.required(q, need.milli, 1)
                    for q in pool.chain
                ):
                    continue
                key = (
                    -self._affinity(pool, siblings),
                    -(
                        len(self._ledger.shared(pool.index)) * 1000
                        - self._ledger.granted[pool.index]
                    ),
                    self._ledger.members[pool.index],
                    -self._ledger.memory_free(pool),
                    pool.index,
                )
                if best is None or key < best[0]:
                    best = (key, pool)
            if best is not None:
                break
        return None if best is None else best[1]

    def _affinity(self, pool: Pool, siblings: Sequence[tuple[int, int]]) -> int:
        """How much `pool` suits the container's affinities: each (pool, weight) pulls
        (positive) or pushes (negative) in proportion to how close the pools are."""
        row = self._closeness[pool.index]
        return sum(weight * row[s] for s, weight in siblings)

    # ----- bookkeeping ---------------------------------------------------------------------

    def _entry(self, request: ContainerRequest, need: Need, pool: Pool, cpus: CPUSet) -> Admitted:
        kind = need.kind
        return Admitted(request, kind, cpus, pool.name, need.milli if need.shares else 0)

    def _add(self, entry: Admitted) -> None:
        key = entry.request.key
        self.admitted[key] = entry
        if self._ledger.add(entry, self._by_name.get(entry.pool)):
            self._placement_cache.clear()  # every pool's shared CPUs may have changed
        self._placement_cache.pop(key, None)

    def _remove(self, entry: Admitted) -> None:
        key = entry.request.key
        if self._ledger.remove(entry, self._by_name.get(entry.pool)):
            self._placement_cache.clear()  # every pool's shared CPUs may have changed
        self._placement_cache.pop(key, None)

    def _pinned(self, cpus: CPUSet) -> CPUSet | None:
        return self._ledger.mems_of(cpus) if self.config.pinMemory and cpus else None
