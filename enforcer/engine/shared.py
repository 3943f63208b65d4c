"""The engine's shared state: what its collaborators (admission, release, re-pinning,
verification, reconciliation, restore, reconfiguration) read and change, on the worker thread.

Also the small views every collaborator needs of it: the pinning a container should have now,
the container as the controllers see it, the gauges after a change, and whether this process
may decide at all.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from enforcer.controllers.base import Outcome, Result, Target
from enforcer.controllers.group import Controllers
from enforcer.decode import (
    ClassSettings,
    ContainerCreate,
    ContainerRequest,
    Machine,
    decode_container,
)
from enforcer.engine import claimed
from enforcer.engine.model import Entry, Pinning
from enforcer.engine.ports import DeviceSource, Runtime
from enforcer.engine.registry import Registry
from enforcer.engine.stopped import StoppedContainers
from enforcer.metrics import EnforcerMetrics
from enforcer.policy import Policy, make_policy
from enforcer.refusal import Reason, Refusal
from enforcer.state import StateStore
from enforcer.topology import CPUSet, Topology
from resource_contract.config import Config

# One logger for the whole engine, whichever collaborator speaks: the name operators filter on.
log = logging.getLogger("enforcer.engine.enforcer")

# Live containers whose creation the runtime did not record, remembered at most.
MAX_UNADOPTABLE = 4096


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


class Shared:
    """The engine's state, one per Enforcer; changed on the worker thread only."""

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
        devices: DeviceSource | None = None,
    ) -> None:
        self.topology = topology
        self.devices = devices  # kubelet's pod-resources API, read for preferCloseToDevices
        self.config = config
        # Values a controller read to be put back later, not yet in the state file.
        self.originals_unsaved = False
        self.runtime = runtime
        self.metrics = metrics or EnforcerMetrics()
        self.controllers = controllers
        self.clock = clock
        self.classes = class_settings(config)
        self.machine = Machine.of(topology)  # what kubelet's and the annotations' numbers may name
        self._topology_state = topology.to_dict()  # the machine does not change under us
        self.registry = self.new_registry(store)
        # What a container inherits when nobody pins it (an empty cpuset means "inherit").
        self.all_mems = str(
            CPUSet(n.id for n in topology.nodes.values() if n.memory_bytes or n.cpus)
        )
        # Set when this process must not decide (it never got the node's state): why.
        self.not_in_charge: str | None = None
        # No placement is decided before the runtime's containers were read after the start.
        self.reconciled = False
        self.repin_failed = False  # a re-pin the runtime refused: retried by `maintain`
        self.vanished = False  # a re-pin found its container gone: the pools move again
        self.repinning = False
        # Live containers whose creation the runtime did not record: not asked about again.
        self.unadoptable: set[str] = set()
        # Containers kubelet stopped, while the runtime may still list them (never adopted
        # again on that account; see enforcer.engine.adoption).
        self.stopped = StoppedContainers(clock)
        self.verified_at = clock()
        # Counts the changes of placements (decisions, releases, reconfigurations): whoever
        # follows the node's use (metrics, the NodeResourceTopology) measures again when it moved.
        self.changes = 0
        self.count_pending = False  # a decision's gauges, left for `sync_state`

    def new_registry(self, store: StateStore | None) -> Registry:
        """An empty registry under the configured policy, saving to `store`."""
        return Registry(make_policy(self.topology, self.config.policy), store, self.header)

    @property
    def policy(self) -> Policy:
        return self.registry.policy

    @property
    def all_cpus(self) -> str:
        return str(self.policy.available)

    def header(self) -> dict[str, Any]:
        header = {"topology": self._topology_state, "policyConfig": self.config.policy.model_dump()}
        saved = self.controllers.saved() if self.controllers is not None else {}
        if saved:  # what a controller must remember across a crash (CPU classes' originals)
            header["controllers"] = saved
        return header

    def persist(self) -> None:
        """Writes the whole state now; StateWriteFailed when it cannot."""
        with self.registry.change():
            pass

    def mark_unadoptable(self, container_id: str) -> None:
        """A live container whose creation the runtime did not record: not asked again."""
        if len(self.unadoptable) >= MAX_UNADOPTABLE:  # bounded: forget the oldest guesses
            self.unadoptable.clear()
        self.unadoptable.add(container_id)

    # -- deciding ------------------------------------------------------------------------------

    def may_decide(self) -> None:
        """Refusal (unavailable) while this process must not place anything, saying why."""
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

    def decode(self, create: ContainerCreate) -> ContainerRequest:
        """What a container asks for, with its claims' and the controllers' say."""
        wanted = decode_container(
            create, classes=self.classes, machine=self.machine, warn=log.warning
        )
        wanted = claimed.for_container(self.policy, create, wanted)
        if self.controllers is not None:
            wanted = self.controllers.admit(wanted)
        return self._with_devices(wanted)

    def _with_devices(self, wanted: ContainerRequest) -> ContainerRequest:
        """policy.preferCloseToDevices: the devices kubelet gave a container that could have
        CPUs of its own, read before the decision (kubelet not answering: none, logged)."""
        if (
            self.devices is None
            or not self.config.policy.preferCloseToDevices
            or not wanted.exclusive_eligible
            or not wanted.exclusive_cpus
        ):
            return wanted
        facts = self.devices.devices_of(wanted.namespace, wanted.pod_name, wanted.container)
        if facts is None or not facts.devices:
            return wanted
        return replace(wanted, devices=facts.devices, device_nodes=facts.nodes)

    # -- views of a container ------------------------------------------------------------------

    def wanted(self, key: str) -> Pinning:
        """The cpuset and memory nodes a container should have now. Where the policy leaves a
        value alone it is kubelet's, or everything (kubelet's empty value inherits it)."""
        request = self.registry.request(key)
        if pinned := claimed.pinning_of(self.policy, self.topology, request):
            return Pinning(str(pinned[0]), str(pinned[1]))
        placement = self.registry.placement(key)
        cpus = str(placement.cpus or request.kubelet_cpus) or self.all_cpus
        mems = str(placement.mems or request.kubelet_mems) or self.all_mems
        return Pinning(cpus, mems)

    def target(self, entry: Entry) -> Target | None:
        """The container as the controllers see it, with its decided pinning; None before the
        runtime gave it an id."""
        if entry.container_id is None or entry.key not in self.registry:
            return None
        wanted = self.wanted(entry.key)
        placement = self.registry.placement(entry.key)
        return Target(
            entry.container_id,
            entry.cgroup_parent,
            self.registry.request(entry.key),
            wanted.cpus,
            wanted.mems,
            placement.pool if placement.kind in ("balloon", "reserved") else None,
        )

    def name(self, key: str) -> str:
        req = self.registry.request(key)
        return f"pod {req.namespace}/{req.pod_name} container {req.container}"

    def record(self, outcomes: Iterable[Outcome], container_id: str) -> None:
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

    # -- gauges --------------------------------------------------------------------------------

    def count(self) -> None:
        """A change of placements: counted, and the gauges by pool set again."""
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
