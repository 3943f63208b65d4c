"""The enforcer's core loop, one CRI event at a time:

CRI request -> decoded ContainerRequest -> policy decision -> applied (the request rewritten,
other containers re-pinned) -> state persisted.

Every method runs on one worker thread (see enforcer.relay.service), so the policy, the
ledger and the state file change in one order and need no locks.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

import grpc

from enforcer.cri import api_pb2
from enforcer.cri.convert import container_create, kubelet_resources
from enforcer.decode import (
    ClassSettings,
    ContainerRequest,
    DecodeError,
    decode_container,
    estimate_from_cri,
)
from enforcer.engine.classes import ClassControllers, ClassRefused
from enforcer.engine.ledger import Ledger, Tracked
from enforcer.metrics import EnforcerMetrics
from enforcer.policy import PlacementError, Policy, make_policy
from enforcer.refusal import Reason, Refusal
from enforcer.runtime import RuntimeClient, RuntimeContainer
from enforcer.state import StateStore
from enforcer.topology import CPUSet, Topology
from resource_contract.classes import is_runtime_class_key
from resource_contract.config import Config

log = logging.getLogger(__name__)


class Refused(Refusal):
    """A call the enforcer answers itself, refusing it, instead of passing it on."""


@dataclass(frozen=True)
class ContainerView:
    """One row of `status`."""

    key: str
    namespace: str
    pod: str
    container: str
    container_id: str | None
    qos: str
    kind: str
    pool: str
    cpus: str | None
    mems: str | None
    exclusive: str
    rdt_class: str | None
    blockio_class: str | None


def class_settings(config: Config) -> ClassSettings:
    return ClassSettings(
        rdt=config.configured_classes("rdt"),
        blockio=config.configured_classes("blockio"),
        access=config.class_access(),
        preferences=config.preference_access(),
    )


class Enforcer:
    def __init__(
        self,
        *,
        topology: Topology,
        config: Config,
        store: StateStore,
        runtime: RuntimeClient,
        metrics: EnforcerMetrics | None = None,
        classes: ClassControllers | None = None,
    ) -> None:
        self.topology = topology
        self.config = config
        self.store = store
        self.runtime = runtime
        self.policy: Policy = make_policy(topology, config.policy)
        self.classes = class_settings(config)
        self.metrics = metrics or EnforcerMetrics()
        self.controllers = classes
        self._topology_state = topology.to_dict()  # the machine does not change under us
        # What a container inherits when nobody pins it (an empty cpuset means "inherit").
        self._all_cpus = str(self.policy.available)
        self._all_mems = str(
            CPUSet(n.id for n in topology.nodes.values() if n.memory_bytes or n.cpus)
        )
        self.dirty = False  # changes not yet written to the state file
        # Set when this process must not decide (it never got the node's state): why.
        self.not_in_charge: str | None = None
        self.ledger = Ledger()
        # Counts container bindings, so a listing can tell which containers it could have seen.
        self.sequence = 0
        # Admitted keys whose creation has an unknown outcome (the enforcer restarted, or the
        # call was cut off): the runtime is asked, by the pod's labels, before they are freed.
        self._unresolved: set[str] = set()
        self.repin_failed = False  # a re-pin the runtime refused: retried by `maintain`

    # -- persistence -------------------------------------------------------------------------

    def flush(self) -> None:
        """Writes changes that were left for later (see `container_created`)."""
        if self.dirty:
            self.persist()

    def persist(self, *, durable: bool = False) -> None:
        self.dirty = False
        self._count_cpus()
        self.store.save(
            {
                "topology": self._topology_state,
                "policyConfig": self.config.policy.model_dump(),
                "policy": self.policy.to_state(),
                "containers": self.ledger.to_state(),
            },
            durable=durable,
        )

    def _count_cpus(self) -> None:
        policy = self.policy
        taken = policy.taken
        self.metrics.cpus.labels("exclusive").set(len(taken))
        self.metrics.cpus.labels("reserved").set(len(policy.reserved))
        self.metrics.cpus.labels("shared").set(len(policy.available - taken))
        self.metrics.cpus.labels("free").set(len(policy.available - taken - policy.reserved))

    # -- configuration -----------------------------------------------------------------------

    def reconfigure(self, config: Config) -> list[str]:
        """Applies a new configuration to everything running; returns, by container, what
        had to move.

        Containers keep their CPUs where the new configuration allows; those whose CPUs are
        no longer theirs to keep are placed anew, on the shared pool if nothing else fits
        (never left on CPUs someone else may now hold). Raises ConfigError when the
        configuration does not fit the machine; then nothing changes.
        """
        policy = make_policy(self.topology, config.policy)
        if self.controllers is not None:
            self.controllers.configure(config)
        failures = dict(_by_name(p) for p in policy.restore(self.policy.to_state()))
        notes = []
        for key, admitted in self.policy.admitted.items():
            request = admitted.request
            name = f"{request.namespace}/{request.pod_name}/{request.container}"
            if key not in policy.admitted:
                shared = replace(request, preferences=replace(request.preferences, shared=True))
                try:
                    policy.admit(shared)
                    notes.append(
                        f"{name}: {failures.get(name, 'no longer fits')}; placed on the shared pool"
                    )
                except PlacementError as exc:
                    # Nowhere at all: left as it runs, and said loudly.
                    policy.admit(
                        replace(request, preferences=replace(request.preferences, preserve=True))
                    )
                    notes.append(f"{name}: cannot be placed ({exc}); left where it runs")
                    log.error("after reconfiguration, %s cannot be placed: %s", name, exc)
                continue
            before, after = admitted.exclusive, policy.admitted[key].exclusive
            if before != after:
                notes.append(f"{name}: exclusive CPUs {before or 'none'} -> {after or 'none'}")
        for note in notes:
            log.warning("after reconfiguration: %s", note)
        self.config = config
        self.policy = policy
        self.classes = class_settings(config)
        self.repin()
        if self.controllers is not None:
            # Class definitions may have changed: rewrite every running container's files.
            for tracked in self.ledger.by_key.values():
                now = policy.admitted.get(tracked.key)
                if tracked.started and tracked.container_id and now is not None:
                    self.controllers.apply_blockio(
                        now.request, tracked.cgroup_parent, tracked.container_id
                    )
        self.persist(durable=True)
        return notes

    # -- CRI events --------------------------------------------------------------------------

    def create_container(self, request: api_pb2.CreateContainerRequest) -> str:
        """Admits the container and rewrites `request` in place; returns the policy key.

        Raises Refused when the container must not be created.
        """
        if self.not_in_charge:
            raise Refused(Reason.UNAVAILABLE, self.not_in_charge)
        try:
            wanted = decode_container(
                container_create(request), classes=self.classes, warn=log.warning
            )
            if self.controllers is not None:
                wanted = self.controllers.check(wanted)
            placement = self.policy.admit(wanted)
        except (DecodeError, ClassRefused, PlacementError) as exc:
            self.metrics.refusals.labels(exc.reason.value).inc()
            raise Refused(exc.reason, str(exc)) from None
        self.metrics.decisions.labels(self.policy.name, placement.kind).inc()
        self._unresolved.discard(wanted.key)  # kubelet's retry: this call decides it now
        _hide_class_annotations(request)
        resources = request.config.linux.resources
        if placement.cpus:
            resources.cpuset_cpus = str(placement.cpus)
        if placement.mems:
            resources.cpuset_mems = str(placement.mems)
        tracked = Tracked(
            key=wanted.key,
            sandbox_id=request.pod_sandbox_id,
            cgroup_parent=request.sandbox_config.linux.cgroup_parent,
        )
        tracked.set_resources(resources)
        tracked.applied_cpus = resources.cpuset_cpus or self._all_cpus
        tracked.applied_mems = resources.cpuset_mems or self._all_mems
        self.ledger.by_key[wanted.key] = tracked
        # Durable before the runtime hears of it: after a crash the CPUs are still known taken.
        self.persist(durable=True)
        log.info(
            "admitted %s/%s container %s: %s cpus=%s mems=%s (from %s)",
            wanted.namespace,
            wanted.pod_name,
            wanted.container,
            placement.kind,
            placement.cpus,
            placement.mems,
            wanted.source,
        )
        return wanted.key

    def container_created(self, key: str, container_id: str) -> None:
        tracked = self.ledger.by_key.get(key)
        if tracked is None:
            return
        tracked.container_id = container_id
        self.sequence += 1
        tracked.bound_at = self.sequence
        self.repin()
        # Not written now: which container is which is found again from the runtime after a
        # crash, and kubelet is waiting for this answer. `flush` writes it shortly after.
        self.dirty = True

    def create_failed(self, key: str, status: int, details: str) -> None:
        """The CreateContainer call did not come back with a container id."""
        tracked = self.ledger.by_key.get(key)
        if tracked is None or tracked.container_id is not None:
            return
        if status in _UNCERTAIN:
            # Cut off (cancelled, timed out, connection lost): containerd may have made it.
            self._unresolved.add(key)
            self.resolve()
            return
        self._release([tracked], f"the runtime refused to create it: {details}")

    def resolve(self) -> None:
        """Asks the runtime about admissions whose creation has an unknown outcome: those it
        has are bound, the others released. Keeps them when the runtime cannot be asked."""
        if not self._unresolved:
            return
        try:
            live = {_label_key(c): c for c in self.runtime.list_containers() if c.alive}
        except grpc.RpcError as exc:
            log.warning(
                "cannot ask the runtime about %d creations yet: %s",
                len(self._unresolved),
                exc.details(),
            )
            return
        for key in sorted(self._unresolved):
            tracked = self.ledger.by_key.get(key)
            if tracked is not None and tracked.container_id is None:
                found = live.get(key)
                if found is not None:
                    self.container_created(key, found.id)
                else:
                    self._release([tracked], "its creation did not complete")
        self._unresolved.clear()

    def maintain(self) -> None:
        """Periodic work: unknown creations resolved, refused re-pins retried, state written."""
        self.resolve()
        if self.repin_failed:
            self.repin()
        self.flush()

    def container_started(self, container_id: str) -> None:
        tracked = self.ledger.by_container(container_id)
        if tracked is None:
            return
        tracked.started = True
        admitted = self.policy.admitted.get(tracked.key)
        if self.controllers is not None and admitted is not None:
            self.controllers.apply(admitted.request, tracked.cgroup_parent, container_id)

    def container_gone(self, container_id: str, why: str) -> None:
        tracked = self.ledger.by_container(container_id)
        if tracked is not None:
            self._release([tracked], why)

    def sandbox_gone(self, sandbox_id: str, why: str) -> None:
        self._release(self.ledger.of_sandbox(sandbox_id), why)

    def gone(
        self, containers: Iterable[api_pb2.Container], *, complete: bool, asked_at: int
    ) -> list[Tracked]:
        """Tracked containers a ListContainers answer shows exited, or that vanished from a
        complete (unfiltered) listing asked for after they were created (`asked_at`).

        Reads only, so the relay may call it on its own thread to skip needless work.
        """
        states = {c.id: c.state for c in containers}
        found = []
        for tracked in list(self.ledger.by_key.values()):
            if tracked.container_id is None:
                continue
            state = states.get(tracked.container_id)
            vanished = complete and state is None and tracked.bound_at <= asked_at
            if state == api_pb2.CONTAINER_EXITED or vanished:
                found.append(tracked)
        return found

    def observed(
        self, containers: Iterable[api_pb2.Container], *, complete: bool, asked_at: int
    ) -> None:
        """Releases what a ListContainers answer shows gone (see `gone`)."""
        self._release(
            self.gone(containers, complete=complete, asked_at=asked_at), "it exited or vanished"
        )

    def update_resources(self, request: api_pb2.UpdateContainerResourcesRequest) -> None:
        """kubelet's own update: its limits apply, our pinning stays. A changed CPU request or
        limit (an in-place resize) is placed anew first; Refused when it does not fit."""
        if self.not_in_charge:
            raise Refused(Reason.UNAVAILABLE, self.not_in_charge)
        tracked = self.ledger.by_container(request.container_id)
        if tracked is None or not request.HasField("linux"):
            return
        admitted = self.policy.admitted[tracked.key]
        resized = resized_request(admitted.request, request.linux)
        if resized is not None:
            try:
                self.policy.admit(resized, keep=admitted.exclusive or None)
            except PlacementError as exc:
                self.policy.admit(admitted.request, keep=admitted.exclusive or None)
                raise Refused(exc.reason, f"resize refused: {exc}") from None
            log.info(
                "resized %s: CPU request %dm -> %dm",
                tracked.key,
                admitted.request.cpu_request_milli,
                resized.cpu_request_milli,
            )
        cpus, mems = self._wanted(tracked)
        _pin(request.linux, cpus, mems)
        tracked.set_resources(request.linux)
        tracked.applied_cpus, tracked.applied_mems = cpus, mems
        if resized is not None:
            self.repin()
        self.persist()

    # -- applying ----------------------------------------------------------------------------

    def _release(self, tracked: list[Tracked], why: str) -> None:
        if not tracked:
            return
        for t in tracked:
            admitted = self.policy.release(t.key)
            self.ledger.by_key.pop(t.key, None)
            if admitted is not None:
                req = admitted.request
                log.info(
                    "released %s/%s container %s (%s): %s",
                    req.namespace,
                    req.pod_name,
                    req.container,
                    t.container_id or "not created",
                    why,
                )
        self.repin()
        self.persist()

    def _wanted(self, tracked: Tracked) -> tuple[str, str]:
        """The cpuset and memory nodes a container should have now. Where the policy leaves a
        value alone it is kubelet's, or everything (kubelet's empty value inherits it)."""
        admitted = self.policy.admitted[tracked.key]
        placement = self.policy.placement(tracked.key)
        request = admitted.request
        cpus = str(placement.cpus) if placement.cpus else request.kubelet_cpus or self._all_cpus
        mems = str(placement.mems) if placement.mems else request.kubelet_mems or self._all_mems
        return cpus, mems

    def repin(self) -> None:
        """Brings every live container to its current placement (shared pools move). A re-pin
        the runtime refuses is logged and retried by `maintain`; `status` shows what is applied."""
        self.repin_failed = False
        moves = []
        for tracked in list(self.ledger.by_key.values()):
            if tracked.container_id is None:
                continue
            cpus, mems = self._wanted(tracked)
            if (cpus, mems) != (tracked.applied_cpus, tracked.applied_mems):
                holds = self.policy.placement(tracked.key).exclusive
                moves.append((bool(holds), tracked.container_id, tracked, cpus, mems))
        # Containers without CPUs of their own move first: by the time a container moves into
        # CPUs of its own (a reconfiguration may swap CPUs between containers), the shared
        # containers that were on them have left.
        moves.sort(key=lambda move: move[0])
        for _, container_id, tracked, cpus, mems in moves:
            resources = tracked.linux_resources()
            _pin(resources, cpus, mems)
            try:
                self.runtime.update_resources(container_id, resources)
            except grpc.RpcError as exc:
                if exc.code() == grpc.StatusCode.NOT_FOUND:
                    self.policy.release(tracked.key)
                    self.ledger.by_key.pop(tracked.key, None)
                    log.info("container %s vanished; released", tracked.container_id)
                    continue
                self.repin_failed = True
                self.metrics.controller_errors.labels("cpuset").inc()
                log.error(
                    "re-pinning container %s to cpus=%s mems=%s failed (will retry): %s",
                    tracked.container_id,
                    cpus,
                    mems,
                    exc.details(),
                )
                continue
            tracked.set_resources(resources)
            tracked.applied_cpus, tracked.applied_mems = cpus, mems
            log.info("re-pinned container %s to cpus=%s mems=%s", tracked.container_id, cpus, mems)

    # -- start-up ----------------------------------------------------------------------------

    def restore_saved(self) -> None:
        """Loads the saved state, before anything else: the CPUs it lists stay taken even
        while the runtime cannot be asked which containers are still alive."""
        saved = self.store.load()
        if saved is None:
            return
        try:
            problems = self.policy.restore(saved.get("policy", {}))
            ledger = Ledger.from_state(saved.get("containers", []))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            # Readable JSON of the wrong shape (another version's): treated as corrupt.
            self.store.move_aside(f"unexpected content: {exc!r}")
            self.policy = make_policy(self.topology, self.config.policy)
            return
        for problem in problems:
            log.warning("after the restart, cannot place %s", problem)
        self.ledger = ledger
        for key in list(self.ledger.by_key):
            if key not in self.policy.admitted:
                self.ledger.by_key.pop(key)
            else:
                self.ledger.by_key[key].bound_at = 0  # the sequence restarts with this process
        self._unresolved = {key for key, t in self.ledger.by_key.items() if t.container_id is None}

    def reconcile(self) -> None:
        """Brings the state in line with the runtime: after a restart, a crash or a lost state.

        Saved containers still alive keep their CPUs; dead ones are released; live containers
        the state does not know are admitted from their recorded configuration, keeping the
        CPUs they run on when those are free. Raises grpc.RpcError when the runtime is away.
        """
        live = {c.id: c for c in self.runtime.list_containers() if c.alive}
        by_label = {_label_key(c): c for c in live.values() if _label_key(c)}
        for key in list(self.ledger.by_key):
            tracked = self.ledger.by_key[key]
            if tracked.container_id is None:
                if key not in self._unresolved:
                    continue  # this process is creating it right now
                # Admitted, then killed before the runtime's answer: did it get created?
                found = by_label.get(key)
                if found is not None:
                    tracked.container_id = found.id
            if tracked.container_id not in live:
                self.policy.release(key)
                self.ledger.by_key.pop(key)
        known = {t.container_id for t in self.ledger.by_key.values()}
        for container in live.values():
            if container.id not in known:
                self._adopt(container)
        self._unresolved.clear()
        self.repin()
        self.persist(durable=True)
        log.info("reconciled with the runtime: %d containers tracked", len(self.ledger.by_key))

    def _adopt(self, container: RuntimeContainer) -> None:
        """Admits a running container the state does not know, from its recorded config."""
        try:
            sandbox = self.runtime.sandbox_config(container.sandbox_id)
            config, spec = self.runtime.container_config(container.id)
        except grpc.RpcError as exc:
            log.warning("cannot read container %s's configuration: %s", container.id, exc.details())
            return
        if sandbox is None or config is None:
            log.warning("container %s has no recorded configuration; not tracked", container.id)
            return
        request = api_pb2.CreateContainerRequest(
            pod_sandbox_id=container.sandbox_id, config=config, sandbox_config=sandbox
        )
        current = ((spec.get("linux") or {}).get("resources") or {}).get("cpu") or {}
        running_on = CPUSet.parse(current.get("cpus", "") or "")
        try:
            wanted = decode_container(
                container_create(request), classes=self.classes, warn=log.warning
            )
            if self.controllers is not None:
                wanted = self.controllers.check(wanted)
            placement = self.policy.admit(wanted, keep=running_on or None)
        except (DecodeError, ClassRefused, PlacementError) as exc:
            log.warning("running container %s cannot be placed: %s", container.id, exc)
            return
        tracked = Tracked(
            key=wanted.key,
            sandbox_id=container.sandbox_id,
            container_id=container.id,
            cgroup_parent=sandbox.linux.cgroup_parent,
        )
        resources = request.config.linux.resources
        tracked.set_resources(resources)
        tracked.applied_cpus = str(running_on) if running_on else self._all_cpus
        tracked.applied_mems = current.get("mems") or self._all_mems
        tracked.started = container.state == api_pb2.CONTAINER_RUNNING
        self.ledger.by_key[wanted.key] = tracked
        log.info("adopted running container %s as %s: %s", container.id, wanted.key, placement.kind)

    # -- views -------------------------------------------------------------------------------

    def views(self) -> list[ContainerView]:
        return views_of(self.policy, self.ledger)


def views_of(policy: Policy, ledger: Ledger) -> list[ContainerView]:
    rows = []
    for key, admitted in policy.admitted.items():
        req: ContainerRequest = admitted.request
        placement = policy.placement(key)
        tracked = ledger.by_key.get(key)
        rows.append(
            ContainerView(
                key=key,
                namespace=req.namespace,
                pod=req.pod_name,
                container=req.container,
                container_id=tracked.container_id if tracked else None,
                qos=req.qos,
                kind=placement.kind,
                pool=placement.pool,
                cpus=_shown(placement.cpus, tracked.applied_cpus if tracked else None),
                mems=_shown(placement.mems, tracked.applied_mems if tracked else None),
                exclusive=str(placement.exclusive),
                rdt_class=req.rdt_class,
                blockio_class=req.blockio_class,
            )
        )
    return rows


def _shown(decided: CPUSet | None, applied: str | None) -> str | None:
    """What the container has; with the policy's value beside it while a re-pin is pending."""
    if decided is None or applied is None or str(decided) == applied:
        return applied if applied else (str(decided) if decided is not None else None)
    return f"{applied} (to {decided})"


def _label_key(container: RuntimeContainer) -> str | None:
    uid = container.labels.get("io.kubernetes.pod.uid")
    return f"{uid}/{container.name}" if uid else None


# CreateContainer outcomes after which the container may exist all the same.
_UNCERTAIN = frozenset(
    code.value[0]
    for code in (
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.UNKNOWN,
    )
)


def resized_request(
    request: ContainerRequest, resources: api_pb2.LinuxContainerResources
) -> ContainerRequest | None:
    """The request with kubelet's new CPU and memory values, or None when they are unchanged."""
    numbers = estimate_from_cri(kubelet_resources(resources))
    changed: dict[str, Any] = {
        name: numbers[name]
        for name in ("cpu_request_milli", "cpu_limit_milli", "memory_limit")
        if numbers[name] != getattr(request, name)
    }
    # kubelet's shares only pin the request down to within a milli-CPU; ignore such noise.
    if (
        set(changed) == {"cpu_request_milli"}
        and abs(changed["cpu_request_milli"] - request.cpu_request_milli) <= 2
    ):
        return None
    if not changed:
        return None
    if "memory_limit" in changed and request.memory_request > changed["memory_limit"] > 0:
        changed["memory_request"] = changed["memory_limit"]
    return replace(request, **changed)


def _by_name(problem: str) -> tuple[str, str]:
    """Policy.restore's "ns/pod/container: reason" split in two."""
    name, _, reason = problem.partition(": ")
    return name, reason


def _hide_class_annotations(request: api_pb2.CreateContainerRequest) -> None:
    """containerd applies RDT and block-I/O classes named in the beta-dialect annotations
    itself, and refuses the container where it has no RDT of its own: the enforcer has applied
    them, so the runtime does not get to see them."""
    for mapping in (request.sandbox_config.annotations, request.config.annotations):
        for key in [k for k in mapping if is_runtime_class_key(k)]:
            del mapping[key]


def _pin(resources: api_pb2.LinuxContainerResources, cpus: str, mems: str) -> None:
    resources.cpuset_cpus = cpus
    resources.cpuset_mems = mems


__all__ = ["ContainerView", "Enforcer", "Refused", "views_of"]
