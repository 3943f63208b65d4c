"""The engine: one runtime event at a time, over domain values only.

runtime event -> decoded ContainerRequest -> policy decision over the registry -> applied
(the pinning returned to the transport, other containers re-pinned) -> verified against the
kernel -> persisted by the registry. Transports (the CRI relay, NRI) map their messages to
these calls and the `Refusal`s back to their status codes; the engine knows neither.

Every method runs on one worker thread (see enforcer.relay.service), so the policy, the
registry and the state file change in one order and need no locks.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from enforcer.controllers.base import Difference, Outcome, Result, Target
from enforcer.controllers.group import Controllers
from enforcer.decode import (
    ClassSettings,
    ContainerCreate,
    ContainerRequest,
    KubeletResources,
    Machine,
    decode_container,
    estimate_from_cri,
)
from enforcer.engine import claimed
from enforcer.engine.adoption import StoppedContainers, adopt, newly_stuck
from enforcer.engine.kubelet_record import KubeletRecord
from enforcer.engine.model import Entry, LiveContainer, Phase, Pinning, Recorded
from enforcer.engine.ports import ContainerMissing, RecordUnusable, Runtime, RuntimeAway
from enforcer.engine.registry import ContainerView, Registry, StateWriteFailed
from enforcer.metrics import EnforcerMetrics
from enforcer.policy import PlacementError, Policy, make_policy
from enforcer.refusal import Reason, Refusal
from enforcer.state import StateStore, check_saved
from enforcer.topology import CPUSet, Topology
from enforcer.usage import Usage, measure
from resource_contract.config import Config

log = logging.getLogger(__name__)

# A creation whose outcome is unknown is given up only when listings taken this long after it
# still do not show the container (the runtime finishes or abandons a creation well within
# it); kubelet's retry, the pod's removal or the container showing up end it sooner.
UNKNOWN_SETTLE_SECONDS = 10.0


def class_settings(config: Config) -> ClassSettings:
    return ClassSettings(
        rdt=config.configured_classes("rdt"),
        blockio=config.configured_classes("blockio"),
        access=config.class_access(),
        preferences=config.preference_access(),
        balloon_types=(
            config.policy.balloon_type_names() if config.policy.name == "balloons" else None
        ),
        balloon_access=config.balloon_access(),
        cpu_classes=set(config.cpuClasses),
        cpu_class_access=config.cpu_class_access(),
        tasks=config.task_classes(),
    )


class Enforcer:
    def __init__(
        self,
        *,
        topology: Topology,
        config: Config,
        store: StateStore | None,
        runtime: Runtime,
        metrics: EnforcerMetrics | None = None,
        controllers: Controllers | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.topology = topology
        self.config = config
        # Values a controller read to be put back later, not yet in the state file.
        self._originals_unsaved = False
        self.runtime = runtime
        self.metrics = metrics or EnforcerMetrics()
        self.controllers = controllers
        self.clock = clock
        self.classes = class_settings(config)
        self.machine = Machine.of(topology)  # what kubelet's and the annotations' numbers may name
        self._topology_state = topology.to_dict()  # the machine does not change under us
        self.registry = Registry(make_policy(topology, config.policy), store, self._header)
        # What a container inherits when nobody pins it (an empty cpuset means "inherit").
        self._all_mems = str(
            CPUSet(n.id for n in topology.nodes.values() if n.memory_bytes or n.cpus)
        )
        # Set when this process must not decide (it never got the node's state): why.
        self.not_in_charge: str | None = None
        # No placement is decided before the runtime's containers were read after the start.
        self.reconciled = False
        self.repin_failed = False  # a re-pin the runtime refused: retried by `maintain`
        self._vanished = False  # a re-pin found its container gone: the pools move again
        self._repinning = False
        # Live containers whose creation the runtime did not record: not asked about again.
        self._unadoptable: set[str] = set()
        # Containers kubelet stopped, while the runtime may still list them (never adopted
        # again on that account; see enforcer.engine.adoption).
        self.stopped = StoppedContainers(clock)
        self._verified_at = clock()
        # Counts the changes of placements (decisions, releases, reconfigurations): whoever
        # follows the node's use (metrics, the NodeResourceTopology) measures again when it moved.
        self.changes = 0
        self._count_pending = False  # a decision's gauges, left for `sync_state`

    @property
    def policy(self) -> Policy:
        return self.registry.policy

    @property
    def sequence(self) -> int:
        return self.registry.sequence

    @property
    def _all_cpus(self) -> str:
        return str(self.policy.available)

    def _header(self) -> dict[str, Any]:
        header = {"topology": self._topology_state, "policyConfig": self.config.policy.model_dump()}
        saved = self.controllers.saved() if self.controllers is not None else {}
        if saved:  # what a controller must remember across a crash (CPU classes' originals)
            header["controllers"] = saved
        return header

    # -- persistence ---------------------------------------------------------------------------

    def flush(self) -> None:
        """Writes changes that were left for later (bindings, applied pinnings)."""
        self.registry.flush()
        self._count()

    def persist(self) -> None:
        """Writes the whole state now (at a stop); StateWriteFailed when it cannot."""
        with self.registry.change():
            pass

    def _count(self) -> None:
        self.changes += 1
        policy = self.policy
        taken = policy.taken
        claimed_cpus = CPUSet().union(*(a.exclusive for a in claimed.claims(policy).values()))
        self.metrics.cpus.labels("exclusive").set(len(taken - claimed_cpus))
        self.metrics.cpus.labels("claimed").set(len(claimed_cpus))
        self.metrics.cpus.labels("reserved").set(len(policy.reserved))
        self.metrics.cpus.labels("shared").set(len(policy.available - taken))
        self.metrics.cpus.labels("free").set(len(policy.available - taken - policy.reserved))
        self.metrics.held.set(len(self.registry.held()))
        entries = self.registry.entries.values()
        self.metrics.stuck.set(sum(1 for e in entries if e.stuck is not None))
        self.metrics.not_as_asked.set(sum(1 for e in entries if e.demoted is not None))
        self.metrics.set_balloons(policy.balloon_views())
        self.metrics.set_cpu_classes(self.config.cpuClasses, policy.cpu_classes())

    def usage(self) -> Usage:
        """The node's CPU and memory use by pool and NUMA node now (on the worker)."""
        return measure(self.topology, self.policy)

    # -- configuration -------------------------------------------------------------------------

    def reconfigure(self, config: Config) -> list[str]:
        """Applies a new configuration to everything running; returns, by container, what
        had to move.

        Containers keep their CPUs where the new configuration allows; the others are placed
        anew, on the shared pool if nothing else fits, and a container that cannot be placed
        at all keeps the CPUs it holds (nobody else gets them). Raises ConfigError when the
        configuration does not fit the machine, StateWriteFailed when the new state cannot be
        written: then nothing changes.
        """
        policy = make_policy(self.topology, config.policy)
        if self.controllers is not None:
            for warning in self.controllers.configure(config):
                log.warning("%s", warning)
        old_policy, old_entries, old_config = self.policy, dict(self.registry.entries), self.config
        try:
            with self.registry.change():
                notes = self.registry.rebuild(policy)
                self.config = config
        except StateWriteFailed:
            self.registry.policy, self.registry.entries, self.config = (
                old_policy,
                old_entries,
                old_config,
            )
            raise
        for note in notes:
            log.warning("after reconfiguration: %s", note)
        self.classes = class_settings(config)
        self.repin()
        if self.controllers is not None:
            # Class definitions may have changed: every running container's classes again.
            for entry in list(self.registry.entries.values()):
                target = self._target(entry)
                if entry.phase is Phase.RUNNING and target is not None:
                    self._record(self.controllers.update(target), target.container_id)
        self._count()
        return notes

    # -- creation ------------------------------------------------------------------------------

    def _may_decide(self) -> None:
        if self.not_in_charge:
            raise Refusal(Reason.UNAVAILABLE, self.not_in_charge)
        store = self.registry.store
        if store is not None and store.write_problem and store.read_problem is None:
            # The folder is asked again now, not at the next periodic write: the first
            # creation after the disk has room again is decided.
            self.registry.write_now()
        if store is not None and store.problem:
            # The saved state cannot be read (deciding without it could hand out CPUs that
            # running containers hold) or the folder cannot be written (nothing decided would
            # count): the store names the path and the OS error.
            raise Refusal(Reason.UNAVAILABLE, store.problem)
        if not self.reconciled:
            raise Refusal(
                Reason.UNAVAILABLE,
                "the enforcer has not yet read the runtime's containers since it started; "
                "retry shortly",
            )

    def _decode(self, create: ContainerCreate) -> ContainerRequest:
        wanted = decode_container(
            create, classes=self.classes, machine=self.machine, warn=log.warning
        )
        wanted = claimed.for_container(self.policy, create, wanted)
        if self.controllers is not None:
            wanted = self.controllers.admit(wanted)
        return wanted

    def create(
        self,
        create: ContainerCreate,
        *,
        sandbox_id: str,
        resources: KubeletRecord,
        sync_later: bool = False,
    ) -> tuple[str, Pinning]:
        """Admits a container about to be created; returns its key and the pinning the runtime
        must create it with. `resources`: what kubelet asked the runtime for.

        The decision is in the state file when this returns. With `sync_later` it is not yet
        durable against a power cut: the transport calls `sync_state` (on the worker) while
        the runtime creates the container, and answers only once it returned.

        Raises a Refusal when the container must not be created.
        """
        self._may_decide()
        try:
            wanted = self._decode(create)
            with self.registry.change(sync_later=sync_later):
                placement = self.registry.admit(wanted)
                pinning = Pinning(
                    str(placement.cpus) if placement.cpus else "",
                    str(placement.mems) if placement.mems else "",
                )
                if pinned := claimed.pinning_of(self.policy, self.topology, wanted):
                    pinning = Pinning(str(pinned[0]), str(pinned[1]))
                self.registry.put(
                    Entry(
                        key=wanted.key,
                        sandbox_id=sandbox_id,
                        cgroup_parent=create.cgroup_parent,
                        resources=resources,
                        applied_cpus=pinning.cpus or create.resources.cpuset_cpus or self._all_cpus,
                        applied_mems=pinning.mems or create.resources.cpuset_mems or self._all_mems,
                    )
                )
        except Refusal as exc:  # DecodeError, PlacementError, StateWriteFailed, a class refused
            self.metrics.refusals.labels(exc.reason.value).inc()
            raise Refusal(exc.reason, str(exc)) from None
        self.metrics.decisions.labels(self.policy.name, placement.kind).inc()
        if sync_later:
            self._count_pending = True  # by `sync_state`, off the call's path
        else:
            self._count()
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
        if ignored := self.policy.cpu_class_ignored(wanted.key):
            log.warning(
                "%s/%s container %s: %s",
                wanted.namespace,
                wanted.pod_name,
                wanted.container,
                ignored,
            )
        return wanted.key, pinning

    def sync_state(self) -> str | None:
        """Makes the state file durable after a `create(..., sync_later=True)`. Returns None,
        or why it could not (logged here): the decision stands (the runtime may have created
        the container already, and the file the next process reads has it), and new decisions
        are refused until the folder takes writes again."""
        try:
            self.registry.sync()
        except StateWriteFailed as exc:
            log.error("%s; the containers decided meanwhile keep their CPUs", exc)
            return str(exc)
        finally:
            if self._count_pending:
                self._count_pending = False
                self._count()
        return None

    def created(self, key: str, container_id: str) -> None:
        entry = self.registry.get(key)
        if entry is None or entry.container_id is not None:
            return
        self.registry.bind(key, container_id)
        self.repin()

    def create_failed(self, key: str, *, uncertain: bool, details: str) -> None:
        """The creation did not come back with a container id. `uncertain`: cut off (cancelled,
        timed out, connection lost), so the runtime may have made it all the same."""
        entry = self.registry.get(key)
        if entry is None or entry.container_id is not None:
            return
        if not uncertain:
            self._release([entry], f"the runtime refused to create it: {details}")
            return
        # The runtime has the last word: the hold stays until it says.
        self.registry.touch(key, phase=Phase.UNKNOWN, unknown_since=self.clock())
        log.warning(
            "creation of %s was cut off (%s); holding its CPUs until the runtime says", key, details
        )
        self.resolve()

    def resolve(self, live: Iterable[LiveContainer] | None = None) -> None:
        """Asks the runtime about creations with an unknown outcome: those it has are bound;
        those it still does not show once the creation must have settled are released. Keeps
        them when the runtime cannot be asked."""
        unknown = [e for e in self.registry.entries.values() if e.phase is Phase.UNKNOWN]
        if not unknown:
            return
        if live is None:
            try:
                live = self.runtime.list_containers()
            except RuntimeAway as exc:
                log.warning("cannot ask the runtime about %d creations yet: %s", len(unknown), exc)
                return
        by_key = {c.key: c for c in live if c.key and not c.exited}
        now = self.clock()
        for entry in unknown:
            found = by_key.get(entry.key)
            if found is not None:
                self.registry.bind(entry.key, found.id)
                if found.running:
                    self.registry.touch(entry.key, phase=Phase.RUNNING)
                log.info("the runtime has %s as container %s", entry.key, found.id)
            elif now - entry.unknown_since >= UNKNOWN_SETTLE_SECONDS:
                self._release([entry], "its creation did not complete")
        self.repin()

    # -- the life cycle ------------------------------------------------------------------------

    def started(self, container_id: str) -> None:
        entry = self.registry.by_container(container_id)
        if entry is None:
            return
        entry = self.registry.touch(entry.key, phase=Phase.RUNNING) or entry
        target = self._target(entry)
        if self.controllers is not None and target is not None:
            self._record(self.controllers.start(target), container_id)
        self.verify(entry)

    def container_gone(self, container_id: str, why: str, *, removed: bool = False) -> None:
        """kubelet stopped (or, `removed`, removed) a container: it is released. A stopped
        one is remembered, so that a runtime that still lists it does not get it adopted again
        (enforcer.engine.adoption); one found stuck stays until the runtime lets it go."""
        if removed:
            self.stopped.forget(container_id)
        entry = self.registry.by_container(container_id)
        if entry is not None:
            self._release(self._stopping([entry], why, removed=removed), why)

    def sandbox_gone(self, sandbox_id: str, why: str, *, removed: bool = False) -> None:
        entries = self.registry.of_sandbox(sandbox_id)
        if removed:
            for entry in entries:
                if entry.container_id is not None:
                    self.stopped.forget(entry.container_id)
        self._release(self._stopping(entries, why, removed=removed), why)

    def _stopping(self, entries: list[Entry], why: str, *, removed: bool) -> list[Entry]:
        """Of the entries kubelet stopped, those to release now (see `container_gone`)."""
        if removed:
            return entries
        for entry in entries:
            if entry.container_id is not None and entry.stuck is None:
                self.stopped.remember(entry.container_id, entry.key, why)
        return [e for e in entries if e.stuck is None]

    def gone(
        self, containers: Iterable[LiveContainer], *, complete: bool, asked_at: int
    ) -> list[Entry]:
        """Entries a listing shows exited, or that vanished from a complete listing asked for
        after they were bound (`asked_at`). Reads only, so the relay may call it on its own
        thread to skip needless work."""
        states = {c.id: c for c in containers}
        found = []
        for entry in list(self.registry.entries.values()):
            if entry.container_id is None:
                continue
            listed = states.get(entry.container_id)
            vanished = complete and listed is None and entry.bound_at <= asked_at
            if (listed is not None and listed.exited) or vanished:
                found.append(entry)
        return found

    def _strangers(self, containers: Iterable[LiveContainer]) -> list[LiveContainer]:
        """Live kubelet containers of a listing whose pod and name the registry does not know
        (one being created, or of unknown outcome, is known: `created` or `resolve` binds it)
        and that were not found unadoptable before."""
        return [
            c
            for c in containers
            if c.key
            and not c.exited
            and c.key not in self.registry
            and c.id not in self._unadoptable
            and c.id not in self.stopped
        ]

    def unadoptable(self, container_id: str) -> None:
        """A live container whose creation the runtime did not record: not asked again."""
        if len(self._unadoptable) >= 4096:  # bounded: forget the oldest guesses
            self._unadoptable.clear()
        self._unadoptable.add(container_id)

    def unknown(self, containers: Iterable[LiveContainer]) -> bool:
        """Whether a complete listing shows live containers to adopt. Reads only (see `gone`)."""
        containers = list(containers)
        return bool(self._strangers(containers) or newly_stuck(self, containers))

    def observed(
        self, containers: Iterable[LiveContainer], *, complete: bool, asked_at: int
    ) -> None:
        """What a listing shows: gone containers released, unknown creations resolved, and
        (from a complete listing) live containers nobody told us about adopted."""
        containers = list(containers)
        self._release(
            self.gone(containers, complete=complete, asked_at=asked_at), "it exited or vanished"
        )
        if not complete:
            return
        self.resolve(containers)
        strangers = self._strangers(containers) + newly_stuck(self, containers)
        self.stopped.listed(containers)
        for container in strangers:
            adopt(self, container)
        if strangers:
            self.repin()

    def update(
        self, container_id: str, kubelet: KubeletResources, resources: KubeletRecord
    ) -> Pinning | None:
        """kubelet's own update: its limits apply, our pinning stays. A changed CPU request or
        limit (an in-place resize) is placed anew first; a Refusal when it does not fit.
        Returns the pinning the update must carry; None for a container we do not track."""
        entry = self.registry.by_container(container_id)
        if entry is None:
            return None
        before = self.registry.decision(entry.key)
        resized = resized_request(before.request, kubelet)
        if resized is None:
            # Nothing to decide: kubelet's values go with the pinning the container has, and
            # are written lazily, so a state that cannot be written now does not hold them up.
            pinning = self._wanted(entry.key)
            self.registry.touch(
                entry.key, resources=resources, applied_cpus=pinning.cpus, applied_mems=pinning.mems
            )
            return pinning
        self._may_decide()
        try:
            with self.registry.change():
                if resized is not None:
                    self.registry.admit(resized, keep=before.exclusive or None)
                pinning = self._wanted(entry.key)
                self.registry.update(
                    entry.key,
                    resources=resources,
                    applied_cpus=pinning.cpus,
                    applied_mems=pinning.mems,
                )
        except (PlacementError, StateWriteFailed) as exc:
            raise Refusal(exc.reason, f"resize refused: {exc}") from None
        if resized is not None:
            log.info(
                "resized %s: CPU request %dm -> %dm",
                entry.key,
                before.request.cpu_request_milli,
                resized.cpu_request_milli,
            )
            self.repin()
        return pinning

    # -- applying ------------------------------------------------------------------------------

    def _release(self, entries: list[Entry], why: str, *, repin: bool = True) -> None:
        if not entries:
            return
        released = []
        stopping = [t for t in map(self._target, entries) if t is not None]
        try:
            with self.registry.change():
                for entry in entries:
                    decision = self.registry.remove(entry.key)
                    if decision is not None:
                        released.append((decision.request, entry.container_id))
        except StateWriteFailed as exc:
            # Rolled back: the CPUs stay held, which is safe. A listing releases those it shows
            # gone; those the runtime never gave an id are left to `resolve`.
            log.error("%s; the release of %d containers waits", exc, len(entries))
            for entry in entries:
                if entry.container_id is None and entry.key in self.registry:
                    self.registry.touch(entry.key, phase=Phase.UNKNOWN, unknown_since=self.clock())
            return
        if self.controllers is not None:
            for target in stopping:
                self._record(self.controllers.stop(target), target.container_id)
        for req, container_id in released:  # said once it is written
            log.info(
                "released %s/%s container %s (%s): %s",
                req.namespace,
                req.pod_name,
                req.container,
                container_id or "not created",
                why,
            )
        self._count()
        if repin:
            self.repin()

    def _wanted(self, key: str) -> Pinning:
        """The cpuset and memory nodes a container should have now. Where the policy leaves a
        value alone it is kubelet's, or everything (kubelet's empty value inherits it)."""
        request = self.registry.request(key)
        if pinned := claimed.pinning_of(self.policy, self.topology, request):
            return Pinning(str(pinned[0]), str(pinned[1]))
        placement = self.registry.placement(key)
        cpus = str(placement.cpus or request.kubelet_cpus) or self._all_cpus
        mems = str(placement.mems or request.kubelet_mems) or self._all_mems
        return Pinning(cpus, mems)

    def repin(self) -> None:
        """Brings every live container to its current placement (shared pools move). A re-pin
        the runtime refuses is logged and retried by `maintain`; `status` shows what is applied."""
        self.repin_failed = False
        self._vanished = False
        self._repinning = True
        try:
            self._repin_once()
        finally:
            self._repinning = False
        if self._vanished:
            self.repin()  # a container was gone: the pools it left move again
            return
        self._node_classes()

    def _node_classes(self) -> None:
        """CPU classes follow the policy's CPUs. The values the writes will replace are read
        and saved in the state first, so that a crash at any point leaves the originals to
        the next process; when they cannot be saved nothing is written (retried at the next
        change)."""
        if self.controllers is None:
            return
        classes = self.policy.cpu_classes()
        self.controllers.exclusive(self.policy.taken)
        if self.controllers.remember(classes) or self._originals_unsaved:
            try:
                self.persist()
            except StateWriteFailed as exc:
                self._originals_unsaved = True
                log.error("%s: CPU classes are not written until the originals are saved", exc)
                return
            self._originals_unsaved = False
        if self.controllers.cpus(classes):
            with contextlib.suppress(StateWriteFailed):  # the store says why; retried by flush
                self.persist()

    def shutdown(self) -> None:
        """The enforcer stops for good (not handing over): what the controllers changed on the
        node as a whole (CPU frequencies, C-states) is put back."""
        if self.controllers is not None:
            self.controllers.shutdown()

    def _repin_once(self) -> None:
        moves = []
        for entry in list(self.registry.entries.values()):
            if entry.container_id is None:
                continue
            pinning = self._wanted(entry.key)
            if (pinning.cpus, pinning.mems) != (entry.applied_cpus, entry.applied_mems):
                holds = self.registry.placement(entry.key).exclusive
                moves.append((bool(holds), entry.container_id, entry, pinning))
        # Containers without CPUs of their own move first: by the time a container moves into
        # CPUs of its own (a reconfiguration may swap CPUs between containers), the shared
        # containers that were on them have left.
        moves.sort(key=lambda move: move[0])
        for _, container_id, entry, pinning in moves:
            if self._apply(entry, container_id, pinning):
                log.info(
                    "re-pinned container %s to cpus=%s mems=%s",
                    container_id,
                    pinning.cpus,
                    pinning.mems,
                )
                current = self.registry.get(entry.key)
                target = self._target(current) if current is not None else None
                if self.controllers is not None and target is not None:
                    self._record(self.controllers.repin(target), target.container_id)
                if current is not None and current.phase is Phase.RUNNING:
                    self.verify(current)

    def _apply(self, entry: Entry, container_id: str, pinning: Pinning) -> bool:
        try:
            try:
                sent = self.runtime.repin(container_id, entry.resources, pinning)
            except RecordUnusable as unusable:
                sent = self.runtime.repin(
                    container_id, self._runtime_record(entry, container_id, unusable), pinning
                )
        except ContainerMissing:
            # Within a re-pin, the others are not re-pinned now: `repin` goes round again.
            self._release([entry], "the runtime no longer has it", repin=not self._repinning)
            self._vanished = True
            return False
        except (RuntimeAway, RuntimeError) as exc:
            self.repin_failed = True
            self.metrics.controller_errors.labels("cpuset").inc()
            log.error(
                "re-pinning container %s to cpus=%s mems=%s failed (will retry): %s",
                container_id,
                pinning.cpus,
                pinning.mems,
                exc,
            )
            return False
        self.registry.set_applied(entry.key, pinning.cpus, pinning.mems)
        self.registry.touch(entry.key, resources=sent)
        return True

    def _runtime_record(
        self, entry: Entry, container_id: str, unusable: RecordUnusable
    ) -> KubeletRecord:
        """The runtime's own record of kubelet's resources for a container whose saved one
        cannot be sent; the saved one's RecordUnusable again when the runtime has none."""
        live = LiveContainer(container_id, entry.sandbox_id, entry.key, running=True, exited=False)
        recorded = self.runtime.recorded(live)
        if recorded is None:
            raise unusable
        log.warning(
            "container %s: %s; re-pinning it with the runtime's own record instead",
            container_id,
            unusable,
        )
        return recorded.resources

    # -- verification --------------------------------------------------------------------------

    def _target(self, entry: Entry) -> Target | None:
        """The container as the controllers see it, with its decided pinning; None before the
        runtime gave it an id."""
        if entry.container_id is None or entry.key not in self.registry:
            return None
        wanted = self._wanted(entry.key)
        placement = self.registry.placement(entry.key)
        return Target(
            entry.container_id,
            entry.cgroup_parent,
            self.registry.request(entry.key),
            wanted.cpus,
            wanted.mems,
            placement.pool if placement.kind in ("balloon", "reserved") else None,
        )

    def _record(self, outcomes: Iterable[Outcome], container_id: str) -> None:
        """Logs and counts what the controllers did for a running container (never raised:
        the container runs already)."""
        for outcome in outcomes:
            kind, name = outcome.controller, outcome.name
            for warning in outcome.warnings:
                log.warning("container %s: %s", container_id, warning)
            what = f"{kind} class {name}" if name else kind
            if outcome.result is Result.FAILED:
                self.metrics.controller_errors.labels(kind).inc()
                log.error("container %s: %s not applied: %s", container_id, what, outcome.detail)
            if name:
                self.metrics.class_applications.labels(kind, name, outcome.result.value).inc()
                if outcome.result is not Result.FAILED:
                    log.info("container %s: %s %s", container_id, what, outcome.result.value)

    def verify(self, entry: Entry) -> bool:
        """Reads back what the kernel has for a running container from every controller and
        repairs a difference (the cpuset through the runtime, classes by applying them again).
        Returns whether it now matches its decision."""
        if self.controllers is None:
            return True
        target = self._target(entry)
        if target is None:
            return True
        differences = self.controllers.verify(target)
        if not differences:
            self.registry.set_problem(entry.key, None, verified=True)
            return True
        name = self._name(entry.key)
        problems = []
        for difference in differences:
            log.warning(
                "%s (container %s): %s %s: repairing",
                name,
                target.container_id,
                difference.controller,
                difference.detail,
            )
            if difference.by_runtime:
                self.metrics.repairs.inc()  # cpuset repairs; a class's count as applications
            left = self._repair(entry, target, difference)
            if left is not None:
                problems.append(left)
        if not problems:
            self.registry.set_problem(entry.key, None, verified=True)
            return True
        problem = "; ".join(problems)
        self.registry.set_problem(entry.key, problem)
        self.metrics.unrepaired.inc()
        log.error("%s (container %s): %s", name, target.container_id, problem)
        return False

    def _repair(self, entry: Entry, target: Target, difference: Difference) -> str | None:
        """Repairs one difference and reads again; what is still wrong, or None."""
        controller = self.controllers.get(difference.controller) if self.controllers else None
        if controller is None:
            return None
        if difference.by_runtime:
            wanted = Pinning(target.cpus, target.mems)
            if self._apply(entry, target.container_id, wanted):
                again = controller.verify(target)
                if again is None:
                    self.registry.set_applied(entry.key, wanted.cpus, wanted.mems, verified=True)
                    return None
                difference = again
            seen = difference.seen[0] if difference.seen else "?"
            return f"cannot repair: the kernel has cpus={seen}, decided cpus={target.cpus}"
        self._record([controller.start(target)], target.container_id)
        again = controller.verify(target)
        if again is None:
            return None
        return f"cannot repair {again.controller}: {again.detail}"

    def sweep(self) -> None:
        """Verifies every running container (the periodic check)."""
        for entry in list(self.registry.entries.values()):
            if entry.phase is Phase.RUNNING:
                self.verify(entry)

    def _name(self, key: str) -> str:
        req = self.registry.request(key)
        return f"pod {req.namespace}/{req.pod_name} container {req.container}"

    def maintain(self) -> None:
        """Periodic work: unknown creations resolved, held containers placed when they can be,
        refused re-pins retried, every running container verified now and then, state written."""
        self.resolve()
        held, demoted = self.registry.place_held(), self.registry.place_as_asked()
        if held or demoted:
            self.repin()  # moved, then verified against the kernel
            self._count()
        if self.repin_failed:
            self.repin()
        now = self.clock()
        if now - self._verified_at >= self.config.verify.periodSeconds:
            self._verified_at = now
            self.sweep()
        self.flush()

    # -- start-up ------------------------------------------------------------------------------

    def restore_saved(self) -> None:
        """Loads the saved state, before anything else: the CPUs it lists stay taken even
        while the runtime cannot be asked which containers are still alive."""
        store = self.registry.store
        saved = store.load() if store is not None else None
        if store is None or saved is None:
            if store is not None:
                self._restore_salvaged(store.salvaged)
            return
        # Entry by entry: a damaged one costs itself, and the log says what was lost.
        checked = check_saved(saved, read_container=Entry.from_dict)
        remembered = saved.get("controllers")
        if self.controllers is not None and isinstance(remembered, Mapping):
            self.controllers.restore(remembered)
        if checked.damage:
            store.move_aside("; ".join(checked.damage), checked.lost)
        try:
            problems = self.registry.restore(
                {**saved, "policy": checked.policy, "containers": checked.containers}
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            # Missed by the checks: treated as corrupt as a whole.
            if not checked.damage:
                store.move_aside(f"unexpected content ({exc!r})", "all of it")
            self.registry = Registry(
                make_policy(self.topology, self.config.policy), store, self._header
            )
            return
        for problem in problems:
            log.warning("after the restart, cannot place %s", problem)
        if checked.damage:
            with contextlib.suppress(StateWriteFailed):  # the store says why
                self.persist()  # the repaired state, before anything else can be lost

    def _restore_salvaged(self, salvaged: Mapping[str, Any]) -> None:
        """From a state file set aside as corrupt: what the controllers remembered (the CPU
        classes' original values, which no runtime can tell again), when its own checksum
        still matched."""
        remembered = salvaged.get("controllers")
        if self.controllers is None or not isinstance(remembered, Mapping):
            return
        self.controllers.restore(remembered)
        log.warning(
            "kept what the controllers remembered (%s) from the corrupt state file: that part's "
            "own checksum matches",
            ", ".join(sorted(remembered)) or "nothing",
        )

    def reconcile(self) -> None:
        """Brings the registry in line with the runtime: after a restart, a crash or a lost
        state. Containers still alive keep their CPUs; dead ones are released; live containers
        the registry does not know are adopted, keeping the CPUs they run on when those are
        free. Raises RuntimeAway when the runtime cannot be asked."""
        live = {c.id: c for c in self.runtime.list_containers() if not c.exited}
        by_key = {c.key: c for c in live.values() if c.key}
        with self.registry.change():
            for key, entry in list(self.registry.entries.items()):
                if entry.container_id is None:
                    if entry.phase is not Phase.UNKNOWN:
                        continue  # this process is creating it right now
                    found = by_key.get(key)
                    if found is None:
                        self.registry.remove(key)
                        continue
                    self.registry.bind(key, found.id)
                    entry = self.registry.entries[key]
                if entry.container_id not in live:
                    self.registry.remove(key)
                    continue
                running = live[entry.container_id].running
                self.registry.update(key, phase=Phase.RUNNING if running else Phase.CREATED)
            known = {e.container_id for e in self.registry.entries.values()}
            for container in live.values():
                if container.id in known:
                    continue
                if container.id not in self.stopped or self.stopped.stuck(container.id):
                    adopt(self, container)
        self.reconciled = True
        self.repin()
        self.sweep()
        self._count()
        log.info("reconciled with the runtime: %d containers tracked", len(self.registry.entries))

    # -- views ---------------------------------------------------------------------------------

    # -- DRA claims (enforcer.engine.claimed; called by the DRA driver, on the worker) ----------

    def hold_claim(self, request: ContainerRequest, cpus: CPUSet) -> None:
        """Holds a prepared claim's CPUs (in the state file when this returns); the shared pools
        move off them. ValueError naming the holder when one is taken meanwhile; Refusal
        (unavailable) while this process may not decide (kubelet retries)."""
        self._may_decide()
        with self.registry.change():
            self.registry.hold_claim(request, cpus)
        self._count()
        self.repin()

    def release_claim(self, uid: str) -> bool:
        """Releases an unprepared claim's CPUs back to the shared pools; False if not held."""
        if self.not_in_charge:
            raise Refusal(Reason.UNAVAILABLE, self.not_in_charge)
        key = claimed.claim_key(uid)
        if key not in self.policy.admitted:
            return False
        with self.registry.change():
            self.registry.remove(key)
        self._count()
        self.repin()
        return True

    def views(self) -> list[ContainerView]:
        return self.registry.views()


def resized_request(
    request: ContainerRequest, kubelet: KubeletResources
) -> ContainerRequest | None:
    """The request with kubelet's new CPU and memory values, or None when they are unchanged.

    An update with no CPU shares, quota or memory limit at all (each 0: "leave it") only sets
    a cpuset, as kubelet's CPU manager reconcile does: that is not a resize (kubelet never asks
    for fewer than 2 shares)."""
    if not (kubelet.cpu_shares or kubelet.cpu_quota or kubelet.memory_limit):
        return None
    numbers = estimate_from_cri(kubelet)
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


__all__ = ["ContainerView", "Enforcer", "Recorded"]
