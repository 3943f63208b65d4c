"""The NRI adapter: the runtime's NRI events mapped to the engine's domain calls.

Configure subscribes to the events the engine needs; Synchronize adopts every container the
runtime has (the engine's reconciliation over the runtime's own picture) and answers with the
updates that bring them in line; CreateContainer admits through the same decoder and policy as
the relay and answers an adjustment (cpuset, memory nodes, and the RDT class where the runtime
applies it), or the relay's refusal as a ttrpc error status; UpdateContainer re-places an
in-place resize; StopContainer, RemoveContainer and the pod events release, whether they come as
StateChange (NRI v0.6.1) or as their own calls (v0.12 and later, enforcer.nri.events); what the
runtime's NRI version offers besides is in enforcer.nri.protocol. Block I/O (and RDT where the
runtime does not apply it) is applied by the engine's controllers when the container starts, as
the relay does.

The runtime waits for every answer (containerd: 2 s, then it drops the plugin): the engine
runs on its worker thread, and an answer that is not ready within ``ANSWER_SECONDS`` is given
without it (a CreateContainer is then refused UNAVAILABLE, for kubelet to retry), with a log
line; the work finishes on the worker and its re-pins follow as UpdateContainers, sent when the
runtime is quiet (enforcer.nri.update_sender says why).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, TypeVar

from enforcer.decode import ContainerCreate, KubeletResources
from enforcer.engine import Enforcer, KubeletRecord, Pinning
from enforcer.nri.connection import (
    RESOURCE_EXHAUSTED,
    UNAVAILABLE,
    Handler,
    NriConnection,
    TtrpcError,
)
from enforcer.nri.convert import (
    adjustment,
    container_create,
    event_name,
    kubelet_resources,
    record_of,
)
from enforcer.nri.events import PER_EVENT, per_event_handler, updated_pod
from enforcer.nri.observe import Observer, counted, no_observer
from enforcer.nri.protocol import Offer
from enforcer.nri.runtime import NriRuntime
from enforcer.nri.session import plugin_method
from enforcer.nri.status import refusal_error
from enforcer.nri.sync_parts import SyncParts, SyncTooLarge
from enforcer.nri.update_sender import UpdateSender
from enforcer.nriapi import api_pb2
from enforcer.refusal import Refusal
from enforcer.worker import EngineWorker

log = logging.getLogger(__name__)

T = TypeVar("T")
ANSWER_SECONDS = 1.5  # within containerd's 2 s per request
# After a response carrying updates, the runtime applies them: their cgroups are read after.
SETTLE_SECONDS = 0.5
RECONCILE_RETRY_SECONDS = 5.0
# Decisions whose fsync PostCreateContainer waits for, by container id (bounded: a runtime
# that never sends the event cannot make it grow).
MAX_PENDING_SYNCS = 4096
E = api_pb2.Event


class Late(Exception):
    """The engine did not answer in time."""


class NriPlugin:
    """The plugin service's handlers over the Enforcer (on the worker it holds), and its re-pins."""

    def __init__(
        self,
        worker: EngineWorker,
        runtime: NriRuntime,
        *,
        reconcile: Callable[[], bool],
        rdt_by_runtime: bool = False,
        answer_seconds: float = ANSWER_SECONDS,
        observe: Observer = no_observer,
    ) -> None:
        self.worker = worker
        self.enforcer: Enforcer = worker.enforcer
        self.observe = observe
        self.runtime = runtime
        self.reconcile = reconcile  # on the worker: True once reconciled
        self.rdt_by_runtime = rdt_by_runtime
        self.answer_seconds = answer_seconds
        self.connection: NriConnection | None = None
        self.synchronized = asyncio.Event()
        self.reconcile_failed: str | None = "no Synchronize from the runtime yet"
        self.sender = UpdateSender(
            runtime, observe, lambda: self.worker.submit(self.enforcer.sweep)
        )
        self._work = self.sender.work
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sender: asyncio.Task[None] | None = None
        self._reconciling: asyncio.Task[None] | None = None
        self._syncs: dict[str, asyncio.Future[str | None]] = {}
        self.offer = Offer()  # what the connected runtime's NRI version offers (Configure)
        self._sync_parts = SyncParts()

    def handlers(self) -> dict[str, Handler]:
        observed = partial(counted, self.observe)
        return {
            plugin_method("Configure"): observed("Configure", self.configure),
            plugin_method("Synchronize"): observed("Synchronize", self._handler(self.synchronize)),
            plugin_method("Shutdown"): observed("Shutdown", self.shutdown),
            plugin_method("CreateContainer"): observed(
                "CreateContainer", self._handler(self.create_container)
            ),
            plugin_method("UpdateContainer"): observed(
                "UpdateContainer", self._handler(self.update_container)
            ),
            plugin_method("StopContainer"): observed(
                "StopContainer", self._handler(self.stop_container)
            ),
            plugin_method("StateChange"): observed(
                "StateChange", self._handler(self.state_change), event_name
            ),
            plugin_method("UpdatePodSandbox"): observed(
                "UpdatePodSandbox", self._handler(self.update_pod_sandbox)
            ),
        } | {
            plugin_method(method): observed(
                method, self._handler(per_event_handler(method, self.on_event))
            )
            for method in PER_EVENT
        }

    # -- the connection's life -------------------------------------------------------------

    async def connected(self, connection: NriConnection) -> None:
        self._loop = asyncio.get_running_loop()
        self.connection = connection
        loop = self._loop

        def wake() -> None:  # from the worker thread
            loop.call_soon_threadsafe(self._work.set)

        self.runtime.wake = wake
        self._sender = asyncio.create_task(self.sender.run(connection))

    async def disconnected(self, reason: str) -> None:
        self.connection = None
        self._sync_parts.clear()
        self.synchronized.clear()
        self.reconcile_failed = f"not connected to the runtime: {reason}"
        self.runtime.disconnected()
        if self._reconciling is not None:
            self._reconciling.cancel()
            self._reconciling = None
        self._work.set()  # the sender sees its connection closed and ends

    @property
    def listening(self) -> bool:
        return self.connection is not None and self.synchronized.is_set()

    def _handler(self, fn: Callable[[bytes], Awaitable[bytes]]) -> Handler:
        """Counts the runtime's requests in flight: unsolicited updates wait for none."""
        return self.sender.serving(fn)

    async def _in_time(self, fn: Callable[..., T], *args: Any) -> T:
        """Runs fn on the worker; Late when it is not done in time (it still finishes)."""
        future = asyncio.ensure_future(self.worker.run(fn, *args))
        done, _ = await asyncio.wait({future}, timeout=self.answer_seconds)
        if not done:
            future.add_done_callback(_log_late_failure)
            raise Late(getattr(fn, "__name__", str(fn)))
        return future.result()

    def _settle(self, updates: list[api_pb2.ContainerUpdate]) -> None:
        """After a response with updates: once the runtime had time to apply them, their
        cgroups are read again and checked."""
        if not updates:
            return
        ids = [u.container_id for u in updates]

        def check() -> None:
            self.runtime.confirmed(ids)
            self.worker.submit(self.enforcer.sweep)

        asyncio.get_running_loop().call_later(SETTLE_SECONDS, check)

    # -- the plugin service ------------------------------------------------------------------

    async def configure(self, payload: bytes) -> bytes:
        request = api_pb2.ConfigureRequest.FromString(payload)
        self.offer = Offer.of(request.NRI_version)
        log.info(
            "configured by %s %s (%s); subscribing to events 0x%x",
            request.runtime_name,
            request.runtime_version,
            self.offer.describe(),
            self.offer.event_mask,
        )
        return api_pb2.ConfigureResponse(events=self.offer.event_mask).SerializeToString()

    async def shutdown(self, payload: bytes) -> bytes:
        log.info("the runtime is shutting down")
        return api_pb2.Empty().SerializeToString()

    async def synchronize(self, payload: bytes) -> bytes:
        request = api_pb2.SynchronizeRequest.FromString(payload)
        try:
            whole = self._sync_parts.add(request, len(payload))
        except SyncTooLarge as exc:
            log.error("refused Synchronize: %s", exc)
            raise TtrpcError(RESOURCE_EXHAUSTED, str(exc)) from None
        if whole is None:  # a part, more follow: answered with more and no updates
            return api_pb2.SynchronizeResponse(more=True).SerializeToString()
        pods, containers = whole
        self.runtime.synchronized(pods, containers)
        log.info(
            "synchronizing with %d pods and %d containers (%d bytes in the last part)",
            len(pods),
            len(containers),
            len(payload),
        )
        attempt = asyncio.ensure_future(self.worker.run(self._reconcile))
        finished, _ = await asyncio.wait({attempt}, timeout=self.answer_seconds)
        if not finished:
            log.warning(
                "reconciliation took over %gs: answering Synchronize without updates; they "
                "follow as UpdateContainers",
                self.answer_seconds,
            )
        if finished and attempt.result():
            self.reconcile_failed = None
        else:
            # Late or failed: finished (and retried until it succeeds) in the background;
            # /healthz says not ready meanwhile.
            self._until_reconciled(attempt)
        self.synchronized.set()
        updates = self.runtime.take_updates()
        self._settle(updates)
        return api_pb2.SynchronizeResponse(update=updates).SerializeToString()

    def _until_reconciled(self, attempt: asyncio.Future[bool]) -> None:
        if self._reconciling is not None:
            self._reconciling.cancel()
        self._reconciling = asyncio.create_task(self._retry_reconcile(attempt, self.connection))

    async def _retry_reconcile(
        self, attempt: asyncio.Future[bool], connection: NriConnection | None
    ) -> None:
        """Waits for a late reconciliation, and retries a failed one every
        RECONCILE_RETRY_SECONDS while the connection that asked for it lasts."""
        while True:
            try:
                done = await attempt
            except Exception as exc:  # the worker is gone: the plugin is stopping
                log.warning("reconciliation not finished: %s", exc)
                return
            if done:
                if self.connection is connection:
                    self.reconcile_failed = None
                    log.info("reconciled with the runtime's containers")
                self._work.set()  # its re-pins go out as UpdateContainers
                return
            await asyncio.sleep(RECONCILE_RETRY_SECONDS)
            if self.connection is not connection:
                return  # a new connection brings its own Synchronize
            attempt = asyncio.ensure_future(self.worker.run(self._reconcile))

    def _reconcile(self) -> bool:
        try:
            if self.reconcile():
                return True
            self.reconcile_failed = "the saved state cannot be read (the log says why)"
            return False
        except Exception as exc:
            self.reconcile_failed = str(exc)
            log.exception("reconciling with the runtime's containers failed")
            return False

    async def create_container(self, payload: bytes) -> bytes:
        request = api_pb2.CreateContainerRequest.FromString(payload)
        pod, container = request.pod, request.container
        self.runtime.container_seen(pod, container, api_pb2.CONTAINER_CREATED)
        create = partial(
            self._admit,
            container_create(pod, container),
            pod.id,
            container.id,
            record_of(container.linux.resources),
        )
        try:
            pinning, rdt = await self._in_time(create)
        except Refusal as exc:
            log.warning("refused CreateContainer: %s", exc)
            self.runtime.container_removed(container.id)
            raise refusal_error(exc) from None
        except Late:
            log.error(
                "CreateContainer of %s/%s container %s: the enforcer did not decide within "
                "%gs; refused for kubelet to retry",
                pod.namespace,
                pod.name,
                container.name,
                self.answer_seconds,
            )
            self.worker.submit(self.enforcer.container_gone, container.id, "answered too late")
            self.runtime.container_removed(container.id)
            raise TtrpcError(
                UNAVAILABLE, "the resource enforcer is busy and did not decide in time; retry"
            ) from None
        # The decision is in the state journal; it is made durable while containerd creates
        # the container, and PostCreateContainer (before kubelet's answer) waits for it.
        if len(self._syncs) >= MAX_PENDING_SYNCS:
            self._syncs.pop(next(iter(self._syncs)))
        self._syncs[container.id] = self.worker.start_soon(self.enforcer.sync_state)
        self.runtime.pinned(container.id, pinning)
        self.sender.opened(container.id)  # until PostCreateContainer
        updates = self.runtime.take_updates()
        self._settle(updates)
        self.worker.flush_soon()
        return api_pb2.CreateContainerResponse(
            adjust=adjustment(
                pinning, rdt if self.rdt_by_runtime else None, rdt_clos=self.offer.rdt_clos
            ),
            update=updates,
        ).SerializeToString()

    def _admit(
        self,
        create: ContainerCreate,
        sandbox_id: str,
        container_id: str,
        record: KubeletRecord,
    ) -> tuple[Pinning, str | None]:
        key, pinning = self.enforcer.create(
            create, sandbox_id=sandbox_id, resources=record, sync_later=True
        )
        # NRI gives the container's id with its creation: bound at once; the re-pins of the
        # containers it narrows go in this response.
        self.enforcer.created(key, container_id)
        return pinning, self.enforcer.registry.request(key).rdt_class

    async def update_container(self, payload: bytes) -> bytes:
        request = api_pb2.UpdateContainerRequest.FromString(payload)
        container = request.container
        kubelet: KubeletResources = kubelet_resources(request.linux_resources)
        update = partial(
            self.enforcer.update,
            container.id,
            kubelet,
            record_of(request.linux_resources),
        )
        try:
            pinning = await self._in_time(update)
        except Refusal as exc:
            log.warning("refused UpdateContainer of %s: %s", container.id, exc)
            raise refusal_error(exc) from None
        except Late:
            log.warning("UpdateContainer of %s answered before the enforcer decided", container.id)
            pinning = None
        updates = self.runtime.take_updates()
        if pinning is not None:
            # The update kubelet asked for carries the container's pinning (its own cpuset
            # would undo it).
            own = [u for u in updates if u.container_id == container.id]
            if not own:
                own = [api_pb2.ContainerUpdate(container_id=container.id)]
                updates.append(own[0])
            cpu = own[0].linux.resources.cpu
            cpu.cpus, cpu.mems = pinning.cpus, pinning.mems
            self.runtime.pinned(container.id, pinning)
        self.sender.opened(container.id)  # until PostUpdateContainer
        self._settle(updates)
        self.worker.flush_soon()
        return api_pb2.UpdateContainerResponse(update=updates).SerializeToString()

    async def stop_container(self, payload: bytes) -> bytes:
        request = api_pb2.StopContainerRequest.FromString(payload)
        self.sender.closed(request.container.id)
        self.runtime.container_seen(request.pod, request.container, api_pb2.CONTAINER_STOPPED)
        try:
            await self._in_time(self.enforcer.container_gone, request.container.id, "stopped")
        except Late:
            log.warning("StopContainer of %s answered before its release", request.container.id)
        updates = self.runtime.take_updates()
        self._settle(updates)
        self.worker.flush_soon()
        return api_pb2.StopContainerResponse(update=updates).SerializeToString()

    async def _durable(self, container_id: str) -> None:
        """Waits (within the answer time) for the fsync of the container's decision."""
        synced = self._syncs.pop(container_id, None)
        if synced is None:
            return  # created before this plugin decided it (or long forgotten)
        try:
            await asyncio.wait_for(asyncio.shield(synced), self.answer_seconds)
        except TimeoutError:
            log.warning(
                "PostCreateContainer of %s answered before its decision was on the disk (the "
                "fsync is slow); it follows",
                container_id,
            )
        except RuntimeError:
            pass  # the worker is shut down: the plugin is stopping

    async def update_pod_sandbox(self, payload: bytes) -> bytes:
        self.runtime.pod_seen(updated_pod(payload))
        return b""  # an empty UpdatePodSandboxResponse

    async def state_change(self, payload: bytes) -> bytes:
        await self.on_event(api_pb2.StateChangeEvent.FromString(payload))
        return api_pb2.Empty().SerializeToString()

    async def on_event(self, event: api_pb2.StateChangeEvent) -> None:
        """A pod or container event, from StateChange or from its own call."""
        pod, container = event.pod, event.container
        work: Callable[[], object] | None = None
        if event.event in (
            E.POST_CREATE_CONTAINER,
            E.POST_START_CONTAINER,
            E.POST_UPDATE_CONTAINER,
        ):
            self.sender.closed(container.id)  # the second half of the runtime's call
        if event.event == E.POST_CREATE_CONTAINER:
            await self._durable(container.id)
        elif event.event == E.RUN_POD_SANDBOX:
            self.runtime.pod_seen(pod)
        elif event.event == E.START_CONTAINER:
            self.sender.opened(container.id)  # until PostStartContainer
            self.runtime.container_seen(pod, container, api_pb2.CONTAINER_RUNNING)
            work = partial(self.enforcer.started, container.id)
        elif event.event == E.REMOVE_CONTAINER:
            self.sender.closed(container.id)
            self._syncs.pop(container.id, None)
            self.runtime.container_removed(container.id)
            work = partial(self.enforcer.container_gone, container.id, "removed", removed=True)
        elif event.event in (E.STOP_POD_SANDBOX, E.REMOVE_POD_SANDBOX):
            why = "pod stopped" if event.event == E.STOP_POD_SANDBOX else "pod removed"
            if event.event == E.REMOVE_POD_SANDBOX:
                self.runtime.pod_removed(pod.id)
            removed = event.event == E.REMOVE_POD_SANDBOX
            work = partial(self.enforcer.sandbox_gone, pod.id, why, removed=removed)
        # Other events (and those of newer runtimes) change nothing here.
        if work is not None:
            try:
                await self._in_time(work)
            except Late:
                log.warning("StateChange %s answered before the enforcer was done", event.event)
            self.worker.flush_soon()
            self._work.set()  # re-pins it caused go out as UpdateContainers after this reply


def _log_late_failure(future: asyncio.Future[Any]) -> None:
    if not future.cancelled() and (exc := future.exception()) is not None:
        log.error("late engine call failed: %s", exc)
