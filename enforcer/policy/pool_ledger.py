"""The topology-aware policy's accounts per pool: exclusively held CPUs, granted shared
milli-CPU, containers and memory charged per NUMA node, and the capacity these leave.

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
"""

from __future__ import annotations

from collections.abc import Sequence

from enforcer.cpuallocator import CPUOptions, release_cpus, usable
from enforcer.decode import ContainerRequest
from enforcer.policy.model import Admitted, PlacementError
from enforcer.policy.need import Need
from enforcer.policy.pool_math import format_bytes, split_memory
from enforcer.policy.pool_tree import Pool
from enforcer.topology import CPUSet, Topology

_EMPTY = CPUSet()
_MEMS_CACHE_LIMIT = 4096


class PoolLedger:
    """What is held, granted and charged in every pool of a tree, and the room left."""

    def __init__(
        self,
        topology: Topology,
        pools: Sequence[Pool],
        reserved: CPUSet,
        cpu_options: CPUOptions,
        *,
        strict_reservation: bool,
    ) -> None:
        self.topology = topology
        self.pools = pools
        self.reserved = reserved
        self.cpu_options = cpu_options
        self.strict_reservation = strict_reservation
        self.reserved_mems = topology.memory_nodes_of_cpus(reserved)
        n = len(pools)
        self.taken = _EMPTY
        self.granted = [0] * n  # milli-CPU granted in the pool or below
        self.sharing = [0] * n  # containers with a shared part in the pool or below
        self.members = [0] * n  # containers placed in the pool or below
        self.pods: dict[str, dict[str, int]] = {}  # pod uid -> key -> pool index
        self._used: dict[int, int] = dict.fromkeys(topology.nodes, 0)
        self._charges: dict[str, dict[int, int]] = {}
        # Caches: the policy's placements read these for every live container after a change.
        self._shared_cache: dict[int, CPUSet] = {}
        self._mems_cache: dict[CPUSet, CPUSet] = {}

    # ----- capacity ------------------------------------------------------------------------

    def shared(self, index: int) -> CPUSet:
        cached = self._shared_cache.get(index)
        if cached is None:
            cached = self._shared_cache[index] = self.pools[index].usable - self.taken
        return cached

    def shared_or_fallback(self, index: int) -> CPUSet:
        """Where the pool's containers with no exclusive CPU run: its shared CPUs. Only the root
        can run out of them, and only while nothing is granted on them (`required`): its
        containers with nothing granted (BestEffort, preserved) then run on the reserved CPUs,
        never on CPUs another container holds."""
        return self.shared(index) or self.reserved

    def required(self, index: int, milli: int = 0, count: int = 0) -> int:
        """Shared CPUs the pool must keep for what is granted in it and below. Without reserved
        CPUs the root always keeps one so that BestEffort containers can start; with reserved
        CPUs it need not: its containers with nothing granted run on the reserved CPUs while it
        has no shared CPU left, as with kubelet and `static`."""
        granted = self.granted[index] + milli
        required = -(-granted // 1000)
        if required or (index == 0 and self.reserved and not self.strict_reservation):
            # The root's containers with nothing granted run on the reserved CPUs when no
            # shared CPU is left (see `shared_or_fallback`), as they do under static and kubelet.
            return required
        if self.sharing[index] + count or index == 0:
            required = 1  # a BestEffort container still needs a CPU to run on
        return required

    def candidates(self, pool: Pool) -> CPUSet:
        """The pool's CPUs that may go exclusive without starving a descendant's grants."""
        shared = self.shared(pool.index)
        protected = self._protected(pool)
        return usable(self.topology, shared - protected if protected else shared, self.cpu_options)

    def _protected(self, pool: Pool) -> CPUSet:
        out = _EMPTY
        for child in pool.children:
            if self.sharing[child]:
                out = out | self._protect(self.pools[child])
        return out

    def _protect(self, pool: Pool) -> CPUSet:
        """CPUs kept back for the shared containers of `pool` and below: those whose loss
        leaves the rest most compact, so exclusive allocations still get whole cores."""
        inner = self._protected(pool)
        missing = self.required(pool.index) - len(inner)
        if missing > 0:
            spare = self.shared(pool.index) - inner
            inner = inner | release_cpus(self.topology, spare, min(missing, len(spare)))
        return inner

    def exclusive_room(self, pool: Pool) -> int:
        room = len(self.candidates(pool))
        for q in pool.chain:
            room = min(room, len(self.shared(q)) - self.required(q))
        return max(room, 0)

    def shared_room(self, pool: Pool) -> int:
        return max(0, min(len(self.shared(q)) * 1000 - self.granted[q] for q in pool.chain))

    def memory_used(self, pool: Pool) -> int:
        return sum(self._used[n] for n in pool.mems)

    def memory_free(self, pool: Pool) -> int:
        return pool.memory_capacity - self.memory_used(pool)

    def memory_fits(self, pool: Pool, amount: int) -> bool:
        """Only the root may be overcommitted: kubelet already admitted the pod, and Burstable
        limits legitimately add up to more than the machine has."""
        if pool.index == 0 or not pool.memory_capacity or not amount:
            return True
        return amount <= self.memory_free(pool)

    # ----- bookkeeping ---------------------------------------------------------------------

    def add(self, entry: Admitted, pool: Pool | None) -> bool:
        """Charges `entry` (placed in `pool`, None for none); True when the held CPUs changed."""
        req = entry.request
        key = req.key
        if entry.exclusive:
            self.taken = self.taken | entry.exclusive
            self._shared_cache.clear()
        if pool is not None:
            shares = entry.kind in ("shared", "mixed")
            for q in pool.chain:
                self.members[q] += 1
                if shares:
                    self.granted[q] += entry.shared_milli
                    self.sharing[q] += 1
            self.pods.setdefault(req.pod_uid, {})[key] = pool.index
        charges = self._charges_of(entry, pool)
        for node, amount in charges.items():
            self._used[node] += amount
        self._charges[key] = charges
        return bool(entry.exclusive)

    def remove(self, entry: Admitted, pool: Pool | None) -> bool:
        """Undoes `add`; True when the held CPUs changed."""
        req = entry.request
        key = req.key
        if entry.exclusive:
            self.taken = self.taken - entry.exclusive
            self._shared_cache.clear()
        if pool is not None:
            shares = entry.kind in ("shared", "mixed")
            for q in pool.chain:
                self.members[q] -= 1
                if shares:
                    self.granted[q] -= entry.shared_milli
                    self.sharing[q] -= 1
            pod = self.pods.get(req.pod_uid, {})
            pod.pop(key, None)
            if not pod:
                self.pods.pop(req.pod_uid, None)
        for node, amount in self._charges.pop(key, {}).items():
            self._used[node] -= amount
        return bool(entry.exclusive)

    def _charges_of(self, entry: Admitted, pool: Pool | None) -> dict[int, int]:
        amount = entry.request.memory_limit or entry.request.memory_request
        if not amount or entry.kind == "preserved":
            return {}
        if entry.kind == "reserved":
            nodes = self.reserved_mems
        elif entry.kind in ("exclusive", "held"):
            nodes = self.mems_of(entry.exclusive)
        else:
            assert pool is not None
            nodes = pool.mems
        return split_memory(self.topology, amount, nodes)

    def mems_of(self, cpus: CPUSet) -> CPUSet:
        """The memory nodes of `cpus` (cached, bounded)."""
        mems = self._mems_cache.get(cpus)
        if mems is None:
            if len(self._mems_cache) >= _MEMS_CACHE_LIMIT:
                self._mems_cache.clear()
            mems = self._mems_cache[cpus] = self.topology.memory_nodes_of_cpus(cpus)
        return mems

    def no_room(
        self, pools: Sequence[Pool], request: ContainerRequest, need: Need, *, full_pcpus_only: bool
    ) -> PlacementError:
        """The refusal of a container no pool has room for, naming the pool that came closest:
        the most room for what was asked, then the tightest."""

        def rank(p: Pool) -> tuple[int, ...]:
            shared = self.shared_room(p)
            if need.exclusive:
                return (self.exclusive_room(p), shared, p.depth, -p.index)
            return (shared, p.depth, -p.index)

        best = max(pools, key=rank)
        exclusive, shared = self.exclusive_room(best), self.shared_room(best)
        memory = ""
        if best.memory_capacity:
            memory = f" and {format_bytes(self.memory_free(best))} memory"
        return PlacementError(
            f"pod {request.namespace}/{request.pod_name} container {request.container}: "
            f"asked for {need.describe()}; no pool has room: the best, {best.name}, has "
            f"{exclusive} CPU{'' if exclusive == 1 else 's'} free for exclusive use, "
            f"{shared}m shared CPU{memory} free"
            + (" (fullPCPUsOnly: whole cores only)" if full_pcpus_only else ""),
            nearest_pool=best.name,
        )
