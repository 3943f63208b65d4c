"""The engine's façade: the `Enforcer` the transports (the CRI relay, NRI) and the DRA driver
call, one runtime event at a time, over domain values only.

runtime event -> decoded ContainerRequest -> policy decision over the registry -> applied
(the pinning returned to the transport, other containers re-pinned) -> verified against the
kernel -> persisted by the registry. Transports map their messages to these calls and the
`Refusal`s back to their status codes; the engine knows neither. The work is done by
collaborators over the shared state (`shared.Shared`), one job each: admission (`admission`),
resize (`resize`), the life cycle and release (`lifecycle`, `release`), re-pinning (`repin`),
verification and repair (`verify`), reconciliation and adoption (`reconcile`, `adoption`),
restore (`restore`), reconfiguration (`reconfigure`) and DRA claims (`claims_held`).

Threads: every method marked `@on_worker` changes the engine and runs on the engine's one
worker thread (`enforcer.worker.EngineWorker`), so the policy, the registry and the state file
change in one order and need no locks; the mark checks it (`enforcer.engine.thread`). `gone`,
`unknown`, `views` and the properties only read: a transport may call them on its event loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from enforcer.controllers.group import Controllers
from enforcer.decode import (
    ClassSettings,
    ContainerCreate,
    ContainerRequest,
    KubeletResources,
    Machine,
)
from enforcer.engine import claims_held, restore
from enforcer.engine.admission import Admission
from enforcer.engine.kubelet_record import KubeletRecord
from enforcer.engine.lifecycle import Lifecycle
from enforcer.engine.model import Entry, LiveContainer, Pinning, Recorded
from enforcer.engine.ports import DeviceSource, Runtime
from enforcer.engine.reconcile import Reconciler
from enforcer.engine.reconfigure import reconfigure
from enforcer.engine.registry import ContainerView, Registry
from enforcer.engine.repin import Repinner
from enforcer.engine.resize import Resizer, resized_request
from enforcer.engine.shared import Shared, class_settings
from enforcer.engine.stopped import StoppedContainers
from enforcer.engine.thread import WorkerThread, on_worker
from enforcer.engine.verify import Verifier
from enforcer.metrics import EnforcerMetrics
from enforcer.policy import Policy
from enforcer.state import StateStore
from enforcer.topology import CPUSet, Topology
from enforcer.usage import Usage, measure
from resource_contract.config import Config


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
        devices: DeviceSource | None = None,
    ) -> None:
        s = Shared(
            topology=topology,
            config=config,
            store=store,
            runtime=runtime,
            metrics=metrics,
            controllers=controllers,
            clock=clock,
            devices=devices,
        )
        self._s = s
        self.worker_thread = WorkerThread()
        self._repinner = Repinner(s, verify=lambda entry: self._verifier.verify(entry))
        self._verifier = Verifier(s, self._repinner)
        self._admission = Admission(s, self._repinner)
        self._resizer = Resizer(s, self._repinner)
        self._lifecycle = Lifecycle(s, self._repinner, self._verifier)
        self._reconciler = Reconciler(s, self._repinner, self._verifier, self._admission)

    # -- the shared state, as the transports and tests read it ---------------------------------

    @property
    def topology(self) -> Topology:
        return self._s.topology

    @property
    def config(self) -> Config:
        return self._s.config

    @property
    def runtime(self) -> Runtime:
        return self._s.runtime

    @property
    def metrics(self) -> EnforcerMetrics:
        return self._s.metrics

    @property
    def controllers(self) -> Controllers | None:
        return self._s.controllers

    @property
    def clock(self) -> Callable[[], float]:
        return self._s.clock

    @property
    def classes(self) -> ClassSettings:
        return self._s.classes

    @property
    def machine(self) -> Machine:
        return self._s.machine

    @property
    def registry(self) -> Registry:
        return self._s.registry

    @property
    def policy(self) -> Policy:
        return self._s.policy

    @property
    def sequence(self) -> int:
        return self._s.registry.sequence

    @property
    def stopped(self) -> StoppedContainers:
        return self._s.stopped

    @property
    def changes(self) -> int:
        """Counts the changes of placements: whoever follows the node's use measures again
        when it moved."""
        return self._s.changes

    @property
    def not_in_charge(self) -> str | None:
        """Set when this process must not decide (it never got the node's state): why."""
        return self._s.not_in_charge

    @not_in_charge.setter
    def not_in_charge(self, why: str | None) -> None:
        self._s.not_in_charge = why

    @property
    def reconciled(self) -> bool:
        """No placement is decided before the runtime's containers were read after the start."""
        return self._s.reconciled

    @reconciled.setter
    def reconciled(self, value: bool) -> None:
        self._s.reconciled = value

    @property
    def repin_failed(self) -> bool:
        """A re-pin the runtime refused: retried by `maintain`."""
        return self._s.repin_failed

    # -- persistence ---------------------------------------------------------------------------

    @on_worker
    def flush(self) -> None:
        """Writes changes that were left for later (bindings, applied pinnings)."""
        self._s.registry.flush()
        self._s.count()

    @on_worker
    def persist(self) -> None:
        """Writes the whole state now (at a stop); StateWriteFailed when it cannot."""
        self._s.persist()

    @on_worker
    def usage(self) -> Usage:
        """The node's CPU and memory use by pool and NUMA node now (on the worker)."""
        return measure(self._s.topology, self._s.policy)

    # -- configuration -------------------------------------------------------------------------

    @on_worker
    def reconfigure(self, config: Config) -> list[str]:
        """Applies a new configuration to everything running; returns, by container, what
        had to move.

        Containers keep their CPUs where the new configuration allows; the others are placed
        anew, on the shared pool if nothing else fits, and a container that cannot be placed
        at all keeps the CPUs it holds (nobody else gets them). Raises ConfigError when the
        configuration does not fit the machine, StateWriteFailed when the new state cannot be
        written: then nothing changes.
        """
        return reconfigure(self._s, self._repinner, config)

    # -- creation ------------------------------------------------------------------------------

    @on_worker
    def create(
        self,
        create: ContainerCreate,
        *,
        sandbox_id: str,
        resources: KubeletRecord,
        sync_later: bool = False,
    ) -> tuple[str, Pinning]:
        """Admits a container about to be created; returns its key and the pinning the runtime
        must create it with. `resources` is the transport's record of kubelet's resources.

        The decision is in the state file when this returns. With `sync_later` it is not yet
        durable against a power cut: the transport calls `sync_state` (on the worker) while
        the runtime creates the container, and answers only once it returned.

        Raises a Refusal when the container must not be created.
        """
        return self._admission.create(
            create, sandbox_id=sandbox_id, resources=resources, sync_later=sync_later
        )

    @on_worker
    def sync_state(self) -> str | None:
        """Makes the state file durable after a `create(..., sync_later=True)`. Returns None,
        or why it could not (logged here): the decision stands (the runtime may have created
        the container already, and the file the next process reads has it), and new decisions
        are refused until the folder takes writes again."""
        return self._admission.sync_state()

    @on_worker
    def created(self, key: str, container_id: str) -> None:
        """The runtime created the container admitted as `key`: bound to its id."""
        self._admission.created(key, container_id)

    @on_worker
    def create_failed(self, key: str, *, uncertain: bool, details: str) -> None:
        """The creation did not come back with a container id. `uncertain`: cut off (cancelled,
        timed out, connection lost), so the runtime may have made it all the same."""
        self._admission.create_failed(key, uncertain=uncertain, details=details)

    @on_worker
    def resolve(self, live: Iterable[LiveContainer] | None = None) -> None:
        """Asks the runtime about creations with an unknown outcome: those it has are bound;
        those it still does not show once the creation must have settled are released. Keeps
        them when the runtime cannot be asked."""
        self._admission.resolve(live)

    # -- the life cycle ------------------------------------------------------------------------

    @on_worker
    def started(self, container_id: str) -> None:
        """The container started: its classes applied, and verified."""
        self._lifecycle.started(container_id)

    @on_worker
    def container_gone(self, container_id: str, why: str, *, removed: bool = False) -> None:
        """kubelet stopped (or, `removed`, removed) a container: it is released. A stopped
        one is remembered, so that a runtime that still lists it does not get it adopted again
        (enforcer.engine.adoption); one found stuck stays until the runtime lets it go."""
        self._lifecycle.container_gone(container_id, why, removed=removed)

    @on_worker
    def sandbox_gone(self, sandbox_id: str, why: str, *, removed: bool = False) -> None:
        """kubelet stopped (or removed) a pod: its containers, as `container_gone`."""
        self._lifecycle.sandbox_gone(sandbox_id, why, removed=removed)

    def gone(
        self, containers: Iterable[LiveContainer], *, complete: bool, asked_at: int
    ) -> list[Entry]:
        """Entries a listing shows exited, or that vanished from a complete listing asked for
        after they were bound (`asked_at`). Reads only, so the relay may call it on its own
        thread to skip needless work."""
        return self._reconciler.gone(containers, complete=complete, asked_at=asked_at)

    @on_worker
    def unadoptable(self, container_id: str) -> None:
        """A live container whose creation the runtime did not record: not asked again."""
        self._s.mark_unadoptable(container_id)

    def unknown(self, containers: Iterable[LiveContainer]) -> bool:
        """Whether a complete listing has work for `observed`: live containers to adopt, or
        creations of unknown outcome to resolve. Reads only (see `gone`)."""
        return self._reconciler.unknown(containers)

    @on_worker
    def observed(
        self, containers: Iterable[LiveContainer], *, complete: bool, asked_at: int
    ) -> None:
        """What a listing shows: gone containers released, unknown creations resolved, and
        (from a complete listing) live containers nobody told us about adopted."""
        self._reconciler.observed(containers, complete=complete, asked_at=asked_at)

    @on_worker
    def update(
        self, container_id: str, kubelet: KubeletResources, resources: KubeletRecord
    ) -> Pinning | None:
        """kubelet's own update: its limits apply, our pinning stays. A changed CPU request or
        limit (an in-place resize) is placed anew first; a Refusal when it does not fit.
        Returns the pinning the update must carry; None for a container we do not track."""
        return self._resizer.update(container_id, kubelet, resources)

    # -- applying and verifying ----------------------------------------------------------------

    @on_worker
    def repin(self) -> None:
        """Brings every live container to its current placement (shared pools move). A re-pin
        the runtime refuses is logged and retried by `maintain`; `status` shows what is applied."""
        self._repinner.repin()

    @on_worker
    def shutdown(self) -> None:
        """The enforcer stops for good (not handing over): what the controllers changed on the
        node as a whole (CPU frequencies, C-states) is put back."""
        if self._s.controllers is not None:
            self._s.controllers.shutdown()

    @on_worker
    def verify(self, entry: Entry) -> bool:
        """Reads back what the kernel has for a running container from every controller and
        repairs a difference (the cpuset through the runtime, classes by applying them again).
        Returns whether it now matches its decision."""
        return self._verifier.verify(entry)

    @on_worker
    def sweep(self) -> None:
        """Verifies every running container (the periodic check)."""
        self._verifier.sweep()

    @on_worker
    def maintain(self) -> None:
        """Periodic work: unknown creations resolved, held containers placed when they can be,
        refused re-pins retried, every running container verified now and then, state written."""
        s = self._s
        self._admission.resolve()
        held, demoted = s.registry.place_held(), s.registry.place_as_asked()
        if held or demoted:
            self._repinner.repin()  # moved, then verified against the kernel
            s.count()
        if s.repin_failed:
            self._repinner.repin()
        now = s.clock()
        if now - s.verified_at >= s.config.verify.periodSeconds:
            s.verified_at = now
            self._verifier.sweep()
        s.registry.flush()
        s.count()

    # -- start-up ------------------------------------------------------------------------------

    @on_worker
    def restore_saved(self) -> None:
        """Loads the saved state, before anything else: the CPUs it lists stay taken even
        while the runtime cannot be asked which containers are still alive."""
        restore.restore_saved(self._s)

    @on_worker
    def reconcile(self) -> None:
        """Brings the registry in line with the runtime: after a restart, a crash or a lost
        state. Containers still alive keep their CPUs; dead ones are released; creations the
        last process never saw answered are held until the runtime shows them or they settle
        (`resolve`); live containers the registry does not know are adopted, keeping the CPUs
        they run on when those are free. Raises RuntimeAway when the runtime cannot be asked."""
        self._reconciler.reconcile()

    # -- DRA claims (enforcer.engine.claimed; called by the DRA driver, on the worker) ----------

    @on_worker
    def hold_claim(self, request: ContainerRequest, cpus: CPUSet) -> None:
        """Holds a prepared claim's CPUs (in the state file when this returns); the shared pools
        move off them. ValueError naming the holder when one is taken meanwhile; Refusal
        (unavailable) while this process may not decide (kubelet retries)."""
        claims_held.hold_claim(self._s, self._repinner, request, cpus)

    @on_worker
    def release_claim(self, uid: str) -> bool:
        """Releases an unprepared claim's CPUs back to the shared pools; False if not held."""
        return claims_held.release_claim(self._s, self._repinner, uid)

    # -- views ---------------------------------------------------------------------------------

    def views(self) -> list[ContainerView]:
        return self._s.registry.views()


__all__ = [
    "ContainerView",
    "Enforcer",
    "Recorded",
    "class_settings",
    "resized_request",
]
