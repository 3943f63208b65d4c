"""Policy `balloons`: containers run in balloons, disjoint sets of CPUs that the operator's
balloon types describe, and that inflate and deflate with their containers' CPU requests.

- A container's type: its balloon annotation; else `reserved` when it asks for reserved CPUs
  (`prefer-reserved-cpus`, which overrides the namespace either way) or its namespace is a
  reserved one; else the first type whose `namespaces` match; else `default`.
- `reserved` is one balloon of fixed size: the reserved CPUs. Every other balloon holds
  max(minCPUs, ceil(sum of its containers' CPU requests / 1000), 1 while it has containers)
  CPUs, never more than maxCPUs (0: no bound). `minBalloons` of each type exist from the
  start (types of higher `allocatorPriority` get their CPUs first); at most `maxBalloons`.
- A container joins the balloon it was in before a restart, else the one it runs on, else
  where its affinity rules pull it; among what remains, the NRI balloons policy's fill chain
  decides (`balloon_fill`: same pod, same namespace, most free CPU without inflating, then
  inflated, a new balloon). Where none can take it, it is refused naming the type and limits.
- CPUs come from the shared allocator: a new balloon from the smallest topology unit with
  room, on whole cores; an inflating one from the free CPUs nearest to those it has (same
  core, L3 group, NUMA node, die, socket); a deflating one gives back those whose loss
  leaves it most compact. A balloon left empty goes when more than minBalloons remain.
- Idle CPUs (in no balloon) are shared with the containers of types with shareIdleCPUsInSame,
  within the same system, package, die, NUMA node or core as their balloon.

Pure: no I/O. Deterministic: the same topology, configuration and calls give the same answers.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

from enforcer.cpuallocator import allocate_cpus, release_cpus
from enforcer.decode import ContainerRequest
from enforcer.policy.balloon_cpus import near, shared_idle
from enforcer.policy.balloon_fill import (
    NEW,
    NEW_RANK,
    Instance,
    choose,
    fill_chain,
    ranked,
)
from enforcer.policy.balloon_types import (
    PRIORITY,
    Balloon,
    balloon_size,
    matches,
    minimum_error,
    ordered_types,
    refusal,
)
from enforcer.policy.base import Policy
from enforcer.policy.model import Admitted, BalloonView, Placement, PlacementError, PoolView
from enforcer.refusal import Reason
from enforcer.topology import CPUSet, Topology
from resource_contract.config import ConfigError
from resource_contract.policy_config import (
    DEFAULT_BALLOON,
    RESERVED_BALLOON,
    BalloonType,
    PolicyConfig,
)

_EMPTY = CPUSet()
_BALLOON_NAME = re.compile(r"(.+)\[(\d{1,6})\]")


class BalloonsPolicy(Policy):
    name = "balloons"
    reserved_shared = False

    def __init__(self, topology: Topology, config: PolicyConfig) -> None:
        super().__init__(topology, config)
        if not self.reserved:
            raise ConfigError(
                ["policy.reservedCPUs: the balloons policy needs at least one reserved CPU"]
            )
        self.types = ordered_types(config)
        reserved = self.types[RESERVED_BALLOON]
        self._config_index = {t.name: i for i, t in enumerate(config.balloonTypes)}
        self._reserved_namespaces = tuple(config.reservedNamespaces) + tuple(reserved.namespaces)
        self.balloons: list[Balloon] = [Balloon(RESERVED_BALLOON, 0, self.reserved)]
        self._held = _EMPTY
        self._create_minimum(at_start=True)

    # ----- the Policy interface ------------------------------------------------------------

    @property
    def taken(self) -> CPUSet:
        """CPUs of the balloons (the reserved one aside) and of held containers."""
        used = CPUSet().union(*(b.cpus for b in self.balloons[1:]))
        return used | self._held

    def admit(self, request: ContainerRequest, *, keep: CPUSet | None = None) -> Placement:
        saved = self._snapshot()
        previous = self.release(request.key)
        try:
            entry = self._decide(request, keep=keep, hint=None)
        except PlacementError:
            self._restore_snapshot(saved, previous)
            raise
        self.admitted[request.key] = entry
        return self.placement(request.key)

    def release(self, key: str) -> Admitted | None:
        entry = self.admitted.pop(key, None)
        if entry is None:
            return None
        if entry.kind == "held":
            self._held = self._held - entry.exclusive
            return entry
        balloon = self._member_of(key)
        if balloon is not None:
            del balloon.members[key]
            self._fit(balloon)
        return entry

    def reinstate(self, entry: Admitted) -> None:
        """Puts back a decision as it was (a rolled-back change): into the same balloon."""
        self.release(entry.request.key)
        key = entry.request.key
        if entry.kind == "held":
            self._held = self._held | (entry.exclusive - self.taken - self.reserved)
        elif entry.kind in ("balloon", "reserved"):
            balloon = self._by_name(entry.pool)
            if balloon is None and (found := _BALLOON_NAME.fullmatch(entry.pool)):
                balloon = Balloon(found[1], int(found[2]), _EMPTY)
                self.balloons.append(balloon)
            if balloon is None:  # not a balloon's name: placed anew when it can be
                self.admitted[key] = entry
                return
            balloon.members[key] = entry.shared_milli
            self._fit(balloon, best_effort=True)
        self.admitted[key] = entry

    def hold(self, request: ContainerRequest, cpus: CPUSet) -> Placement:
        free = cpus & self.available
        free = free - self.taken - self.reserved
        entry = Admitted(request, "held", free, pool="none")
        self.reinstate(entry)
        return self.placement(request.key)

    def placement(self, key: str) -> Placement:
        entry = self.admitted[key]
        if entry.kind == "preserved":
            return Placement(self.preserved_cpus(entry.request), None, _EMPTY, "preserved", "none")
        if entry.kind == "held":
            cpus = entry.exclusive
            return Placement(cpus, None, cpus, "held", entry.pool)
        balloon = self._by_name(entry.pool)
        assert balloon is not None, f"{key} is in {entry.pool}, which does not exist"
        btype = self.types[balloon.type]
        cpus = balloon.cpus | self._shared_idle(balloon)
        pin = btype.pinMemory if btype.pinMemory is not None else self.config.pinMemory
        mems = self.topology.memory_nodes_of_cpus(cpus) if pin and cpus else None
        return Placement(cpus, mems, _EMPTY, entry.kind, balloon.name)

    def preserve_allowed(self, request: ContainerRequest) -> CPUSet:
        # A preserved container runs outside the balloons: on idle and reserved CPUs.
        return self._idle() | self.reserved

    def pools(self) -> list[PoolView]:
        views = []
        for b in self.balloons:
            mems = self.topology.memory_nodes_of_cpus(b.cpus)
            views.append(
                PoolView(
                    name=b.name,
                    depth=0,
                    cpus=b.cpus,
                    shared=b.cpus | self._shared_idle(b),
                    exclusive=_EMPTY,
                    free=self._room(b),
                    shared_milli=b.milli,
                    containers=len(b.members),
                    mems=mems,
                    memory_capacity=sum(self.topology.nodes[n].memory_bytes for n in mems),
                    memory_used=sum(
                        self.admitted[k].request.memory_limit
                        or self.admitted[k].request.memory_request
                        for k in b.members
                        if k in self.admitted
                    ),
                )
            )
        return views

    def balloon_views(self) -> list[BalloonView]:
        return [
            BalloonView(
                type=b.type,
                instance=b.instance,
                name=b.name,
                cpus=b.cpus,
                containers=tuple(b.members),
                milli=b.milli,
                shared_idle=self._shared_idle(b),
                cpu_class=self.types[b.type].cpuClass,
            )
            for b in sorted(self.balloons, key=self._order)
        ]

    def cpu_classes(self) -> dict[int, str]:
        """CPU -> the CPU class its balloon's type asks for (CPUs without one are left out)."""
        out: dict[int, str] = {}
        for b in self.balloons:
            cls = self.types[b.type].cpuClass
            if cls is not None:
                out.update(dict.fromkeys(b.cpus, cls))
        return out

    def cpu_class_ignored(self, key: str) -> str | None:
        entry = self.admitted.get(key)
        if entry is None or entry.request.cpu_class is None:
            return None
        return (
            f"CPU class {entry.request.cpu_class} is not applied: under the balloons policy a "
            "balloon type's cpuClass sets its CPUs' class, not an annotation"
        )

    def state_header(self) -> dict[str, Any]:
        state = super().state_header()
        state["balloons"] = [
            {"type": b.type, "instance": b.instance, "cpus": str(b.cpus)} for b in self.balloons[1:]
        ]
        return state

    def restore(self, state: Mapping[str, Any]) -> list[str]:
        """Rebuilds the saved balloons where they still fit (same CPUs, type still there),
        then puts every container back into its balloon, or places it anew; then tops the
        types up to their minBalloons. Returns one message per container not placed."""
        problems: list[str] = []
        self.balloons = self.balloons[:1]
        saved_balloons = state.get("balloons") or []
        if not isinstance(saved_balloons, list):
            problems.append(f"saved balloons {saved_balloons!r}: unreadable: not a list")
            saved_balloons = []
        entries: list[Admitted] = []
        for i, data in enumerate(state.get("admitted", [])):
            try:
                entries.append(Admitted.from_dict(data))
            except (KeyError, TypeError, ValueError) as exc:
                problems.append(f"saved entry {i}: unreadable: {exc}")
        # Preserved containers before the balloons come back: each was admitted while some of
        # kubelet's CPUs were outside the balloons; balloons grown over all of them since only
        # move it (its placement's cut), as they do while the enforcer runs.
        order = {e.request.key: i for i, e in enumerate(entries)}
        for entry in entries:
            if entry.kind == "preserved":
                self._readmit_saved(entry, problems)
        for data in saved_balloons:
            try:
                self._revive(data)
            except (KeyError, TypeError, ValueError) as exc:
                problems.append(f"saved balloon {data!r}: unreadable: {exc}")
        for entry in entries:
            if entry.kind != "preserved":
                self._readmit_saved(entry, problems)
        # Keep the saved order, so that the next saved state reads like this one.
        self.admitted = dict(
            sorted(self.admitted.items(), key=lambda kv: order.get(kv[0], len(order)))
        )
        for b in list(self.balloons[1:]):
            self._fit(b)
        try:
            self._create_minimum(at_start=False)
        except ConfigError as exc:  # the containers' balloons come first
            problems.extend(exc.problems)
        return problems

    def _readmit_saved(self, entry: Admitted, problems: list[str]) -> None:
        """Puts a saved container back (see `restore`); a refusal changes nothing and is
        added to `problems`."""
        req = entry.request
        saved = self._snapshot()
        try:
            self.admitted[req.key] = self._decide(
                req, keep=entry.exclusive or None, hint=entry.pool
            )
        except PlacementError as exc:
            self._restore_snapshot(saved, None)
            problems.append(f"{req.namespace}/{req.pod_name}/{req.container}: {exc}")

    # ----- deciding ------------------------------------------------------------------------

    def type_of(self, request: ContainerRequest) -> str:
        """The balloon type a container goes to (see the module's docstring)."""
        if request.balloon is not None:
            return request.balloon
        prefers = request.preferences.reserved
        if prefers or (prefers is None and matches(request.namespace, self._reserved_namespaces)):
            return RESERVED_BALLOON
        for name, btype in self.types.items():
            if name != RESERVED_BALLOON and matches(request.namespace, btype.namespaces):
                return name
        return DEFAULT_BALLOON

    def _decide(
        self, request: ContainerRequest, *, keep: CPUSet | None, hint: str | None
    ) -> Admitted:
        if request.preferences.preserve:
            self.preserved_cut(request)
            return Admitted(request, "preserved", pool="none")
        type_name = self.type_of(request)
        btype = self.types.get(type_name)
        where = f"pod {request.namespace}/{request.pod_name} container {request.container}"
        if btype is None:
            raise PlacementError(
                f"{where}: balloon type {type_name!r} is not configured; configured balloon "
                f"types: {', '.join(self.types)}",
                Reason.BAD_REQUEST,
            )
        milli = max(request.shared_milli, 0)
        if type_name == RESERVED_BALLOON:
            reserved = self.balloons[0]
            reserved.members[request.key] = milli
            return Admitted(request, "reserved", pool=reserved.name, shared_milli=milli)
        balloon = self._choose(request, btype, milli, keep=keep, hint=hint)
        if balloon is None:
            raise self._refusal(where, btype, milli)
        balloon.members[request.key] = milli
        self._fit(balloon)
        return Admitted(request, "balloon", pool=balloon.name, shared_milli=milli)

    def _choose(
        self,
        request: ContainerRequest,
        btype: BalloonType,
        milli: int,
        *,
        keep: CPUSet | None,
        hint: str | None,
    ) -> Balloon | None:
        """The balloon request joins (a new one already added), or None when none can.

        First what only we know: the balloon it was in before a restart, the one whose CPUs
        it runs on, where its affinity rules pull it; then the peer's fill chain
        (`balloon_fill`) among the balloons that remain."""
        free = len(self._free())
        options: list[tuple[tuple[int, ...], Instance | None]] = []
        for index, b in enumerate(self.balloons):
            if b.type != btype.name:
                continue
            size = balloon_size(btype, b.milli + milli, len(b.members) + 1)
            if (btype.maxCPUs and size > btype.maxCPUs) or size - len(b.cpus) > free:
                continue
            members = [self.admitted[k].request for k in b.members if k in self.admitted]
            most = len(b.cpus) + free
            most = min(most, btype.maxCPUs) if btype.maxCPUs else most
            shape = (b.name, index, b.cpus, most, b.milli, len(b.members))
            options.append(ranked(request, members, shape, keep, hint))
        count = sum(1 for b in self.balloons if b.type == btype.name)
        size = balloon_size(btype, milli, 1)
        fits = not btype.maxCPUs or size <= btype.maxCPUs
        if fits and (not btype.maxBalloons or count < btype.maxBalloons) and size <= free:
            options.append((NEW_RANK, None))
        if not options:
            return None
        first = min(key for key, _ in options)
        chain = fill_chain(
            prefer_spreading_pods=btype.preferSpreadingPods,
            prefer_per_namespace=btype.preferPerNamespaceBalloon,
            prefer_new=btype.preferNewBalloons,
        )
        instances = [i for key, i in options if key == first and i is not None]
        new_possible = any(key == first and i is None for key, i in options)
        chosen = choose(chain, instances, milli, new_possible=new_possible)
        if isinstance(chosen, Instance):
            return self.balloons[chosen.index]
        return self._new_balloon(btype, size) if chosen == NEW else None

    def _refusal(self, where: str, btype: BalloonType, milli: int) -> PlacementError:
        count = sum(1 for b in self.balloons if b.type == btype.name)
        return refusal(where, btype, milli, count, len(self._free()))

    # ----- sizes and CPUs ------------------------------------------------------------------

    def _target(self, b: Balloon) -> int:
        return balloon_size(self.types[b.type], b.milli, len(b.members))

    def _free(self) -> CPUSet:
        return self.available - self.reserved - self.taken

    def _idle(self) -> CPUSet:
        return self._free()

    def _room(self, b: Balloon) -> int:
        """CPUs the balloon could still grow by (0 for the reserved one)."""
        if b.type == RESERVED_BALLOON:
            return 0
        btype = self.types[b.type]
        free = len(self._free())
        if btype.maxCPUs:
            free = min(free, btype.maxCPUs - len(b.cpus))
        return max(free, 0)

    def _fit(self, b: Balloon, *, best_effort: bool = False) -> None:
        """Inflates or deflates b to its size; drops it when empty beyond minBalloons."""
        if b.type == RESERVED_BALLOON:
            return
        btype = self.types.get(b.type)
        if btype is None:
            return
        if not b.members:
            count = sum(1 for x in self.balloons if x.type == b.type)
            if count > btype.minBalloons:
                self.balloons.remove(b)
                return
        target = self._target(b)
        have = len(b.cpus)
        if target > have:
            free = self._free()
            grow = min(target - have, len(free)) if best_effort else target - have
            if grow:
                b.cpus = b.cpus | near(self.topology, b.cpus, free, grow)
        elif target < have:
            b.cpus = b.cpus - release_cpus(self.topology, b.cpus, have - target)

    def _new_balloon(self, btype: BalloonType, size: int) -> Balloon:
        used = {b.instance for b in self.balloons if b.type == btype.name}
        instance = next(i for i in range(len(used) + 1) if i not in used)
        cpus = allocate_cpus(self.topology, self._free(), size, kind="") if size else _EMPTY
        balloon = Balloon(btype.name, instance, cpus)
        self.balloons.append(balloon)
        return balloon

    def _shared_idle(self, b: Balloon) -> CPUSet:
        level = self.types[b.type].shareIdleCPUsInSame
        if level is None or b.type == RESERVED_BALLOON:
            return _EMPTY
        return shared_idle(self.topology, level, b.cpus, self._idle())

    def _create_minimum(self, *, at_start: bool) -> None:
        """Every type's minBalloons, higher allocatorPriority first; ConfigError naming the
        type when they do not fit."""
        order = sorted(
            (t for t in self.types.values() if t.name != RESERVED_BALLOON),
            key=lambda t: PRIORITY[t.allocatorPriority],
        )
        for btype in order:
            while sum(1 for b in self.balloons if b.type == btype.name) < btype.minBalloons:
                free = self._free()
                if btype.minCPUs > len(free):
                    where = self._config_index.get(btype.name)
                    raise minimum_error(btype, where, free, at_start=at_start)
                self._new_balloon(btype, btype.minCPUs)

    def _revive(self, data: Mapping[str, Any]) -> None:
        """Brings back a saved balloon where it still fits; ValueError (or KeyError, TypeError)
        when it is not in the shape `state_header` writes: never read as another balloon."""
        type_name, instance, cpus_text = data["type"], data["instance"], data["cpus"]
        if not (
            isinstance(type_name, str)
            and isinstance(instance, int)
            and not isinstance(instance, bool)
            and isinstance(cpus_text, str)
        ):
            raise ValueError("not a balloon: type and cpus must be strings, instance an integer")
        cpus = CPUSet.parse(cpus_text)
        btype = self.types.get(type_name)
        if btype is None or type_name == RESERVED_BALLOON:
            return
        count = sum(1 for b in self.balloons if b.type == type_name)
        if btype.maxBalloons and count >= btype.maxBalloons:
            return
        if self._by_name(f"{type_name}[{instance}]") is not None or not cpus <= self._free():
            return
        if btype.maxCPUs and len(cpus) > btype.maxCPUs:
            cpus = cpus - release_cpus(self.topology, cpus, len(cpus) - btype.maxCPUs)
        self.balloons.append(Balloon(type_name, instance, cpus))

    # ----- bookkeeping ---------------------------------------------------------------------

    def _by_name(self, name: str) -> Balloon | None:
        for b in self.balloons:
            if b.name == name:
                return b
        return None

    def _member_of(self, key: str) -> Balloon | None:
        for b in self.balloons:
            if key in b.members:
                return b
        return None

    def _order(self, b: Balloon) -> tuple[int, int]:
        return (list(self.types).index(b.type) if b.type in self.types else 1 << 30, b.instance)

    def _snapshot(self) -> tuple[list[Balloon], CPUSet, dict[str, Admitted]]:
        return copy.deepcopy(self.balloons), self._held, dict(self.admitted)

    def _restore_snapshot(
        self, saved: tuple[list[Balloon], CPUSet, dict[str, Admitted]], previous: Admitted | None
    ) -> None:
        """A refusal changes nothing: balloons, holds and decisions as they were."""
        self.balloons, self._held, self.admitted = saved
        if previous is not None:
            self.admitted[previous.request.key] = previous
