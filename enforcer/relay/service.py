"""The CRI adapter: the calls the relay intercepts, mapped to the engine's domain calls.

CRI messages become domain values (`enforcer.cri.convert`), the engine's pinning is written
back into the message, and its refusals become gRPC status codes. Every other call passes
through untouched. The core runs on the engine's one worker thread
(enforcer.worker): its work is ordered and blocking, and the relay's event loop keeps passing
other calls meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import grpc

from enforcer.cri import api_pb2
from enforcer.cri.convert import (
    container_create,
    hide_class_annotations,
    hide_sandbox_class_annotations,
    kubelet_resources,
    live_container,
    record_of,
)
from enforcer.cri.status import UNCERTAIN, status_of
from enforcer.engine import Enforcer
from enforcer.refusal import Refusal
from enforcer.relay.h2 import AnswerHere, Call, Forward, Response, Tap, TapFactory
from enforcer.worker import EngineWorker

log = logging.getLogger(__name__)

RUNTIME = "/runtime.v1.RuntimeService/"
OK = grpc.StatusCode.OK.value[0]

Interceptor = Callable[[Call], Awaitable[Forward | AnswerHere]]

# Runtimes that read the beta-dialect class annotations from CreateContainer alone, never from
# the sandbox's config (CRI-O reads them from the sandbox: they are hidden at RunPodSandbox too).
SANDBOX_CLASSES_UNREAD = frozenset({"containerd"})

# Complete listings that come within this long of one another are judged once, by the newest.
LISTING_COALESCE_SECONDS = 0.1


class CRIService:
    """Binds intercepted CRI methods to the Enforcer, run on the engine's worker it holds."""

    def __init__(self, worker: EngineWorker) -> None:
        self.worker = worker
        self.enforcer: Enforcer = worker.enforcer
        # The newest complete listing not judged yet (its answer, and the binding sequence
        # when it was asked for). A newer complete listing says all an older one does: asked
        # for later, it can prove more containers gone, and it shows the runtime as it is now.
        self._pending_listing: tuple[bytes, int] | None = None
        # The runtime's name from its answer to Version (kubelet asks first), "" until then.
        self.runtime_name = ""

    def intercepts(self) -> dict[str, Interceptor]:
        return {
            RUNTIME + "RunPodSandbox": self.run_pod_sandbox,
            RUNTIME + "CreateContainer": self.create_container,
            RUNTIME + "StartContainer": self.start_container,
            RUNTIME + "UpdateContainerResources": self.update_container_resources,
            RUNTIME + "StopContainer": self.stop_container,
            RUNTIME + "RemoveContainer": self.remove_container,
            RUNTIME + "StopPodSandbox": self.stop_pod_sandbox,
            RUNTIME + "RemovePodSandbox": self.remove_pod_sandbox,
        }

    # -- container life cycle ----------------------------------------------------------------

    async def run_pod_sandbox(self, call: Call) -> Forward | AnswerHere:
        # containerd reads the beta-dialect classes from CreateContainer only, where they are
        # hidden, and keeps the sandbox's config as given: a lost state is rebuilt from it.
        if self.runtime_name in SANDBOX_CLASSES_UNREAD:
            return Forward(call.message)
        request = _parse(api_pb2.RunPodSandboxRequest, call)
        if isinstance(request, AnswerHere):
            return request
        # Any other runtime (CRI-O, or one not named yet) may read them from the sandbox. Its
        # annotations reach the enforcer again with every CreateContainer.
        if hide_sandbox_class_annotations(request):
            return Forward(request.SerializeToString())
        return Forward(call.message)

    async def create_container(self, call: Call) -> Forward | AnswerHere:
        request = _parse(api_pb2.CreateContainerRequest, call)
        if isinstance(request, AnswerHere):
            return request
        resources = request.config.linux.resources
        try:
            # The decision is in the state file when this returns, not yet fsynced: a restarted
            # enforcer reads it; a power cut is covered by the fsync below before kubelet hears.
            key, pinning = await self.worker.run(
                partial(
                    self.enforcer.create,
                    container_create(request),
                    sandbox_id=request.pod_sandbox_id,
                    resources=record_of(resources),
                    sync_later=True,
                )
            )
        except Refusal as exc:
            log.warning("refused CreateContainer: %s", exc)
            return AnswerHere(status_of(exc.reason), str(exc))
        # The fsync runs on the worker while containerd creates the container (queued once
        # the call is on its way); what the worker does for this call later comes after it.
        synced = self.worker.start_soon(self.enforcer.sync_state)
        hide_class_annotations(request)
        if pinning.cpus:
            resources.cpuset_cpus = pinning.cpus
        if pinning.mems:
            resources.cpuset_mems = pinning.mems

        async def created(response: Response) -> None:
            if response.status == OK and response.message is not None:
                reply = api_pb2.CreateContainerResponse.FromString(response.message)
                # Binding the id and re-checking the others' pinnings need not hold kubelet's
                # answer: queued behind the fsync on the one worker, they run before any later
                # call about this container (StartContainer comes after kubelet hears), and a
                # crash before the binding is written is adopted from the runtime by key.
                self.worker.submit(self.enforcer.created, key, reply.container_id)
                await synced
                self.worker.flush_soon()
            else:
                uncertain = response.status in UNCERTAIN
                await self.worker.run(
                    partial(
                        self.enforcer.create_failed,
                        key,
                        uncertain=uncertain,
                        details=response.details,
                    )
                )
                await synced

        return Forward(request.SerializeToString(), created)

    async def start_container(self, call: Call) -> Forward | AnswerHere:
        request = _parse(api_pb2.StartContainerRequest, call)
        if isinstance(request, AnswerHere):
            return request

        async def started(response: Response) -> None:
            if response.status == OK:
                await self.worker.run(self.enforcer.started, request.container_id)

        return Forward(call.message, started)

    async def update_container_resources(self, call: Call) -> Forward | AnswerHere:
        request = _parse(api_pb2.UpdateContainerResourcesRequest, call)
        if isinstance(request, AnswerHere):
            return request
        if not request.HasField("linux"):
            return Forward(call.message)
        update = partial(
            self.enforcer.update,
            request.container_id,
            kubelet_resources(request.linux),
            record_of(request.linux),
        )
        try:
            pinning = await self.worker.run(update)
        except Refusal as exc:
            return AnswerHere(status_of(exc.reason), str(exc))
        if pinning is None:
            return Forward(call.message)
        request.linux.cpuset_cpus = pinning.cpus
        request.linux.cpuset_mems = pinning.mems
        return Forward(request.SerializeToString())

    async def stop_container(self, call: Call) -> Forward | AnswerHere:
        return self._release_container_after(call, api_pb2.StopContainerRequest, "stopped")

    async def remove_container(self, call: Call) -> Forward | AnswerHere:
        return self._release_container_after(call, api_pb2.RemoveContainerRequest, "removed")

    def _release_container_after(self, call: Call, message: Any, what: str) -> Forward | AnswerHere:
        request = _parse(message, call)
        if isinstance(request, AnswerHere):
            return request
        gone = partial(self.enforcer.container_gone, removed=what == "removed")

        async def done(response: Response) -> None:
            if response.status == OK:
                await self.worker.run(gone, request.container_id, what)

        return Forward(call.message, done)

    async def stop_pod_sandbox(self, call: Call) -> Forward | AnswerHere:
        return self._release_sandbox_after(call, api_pb2.StopPodSandboxRequest, "pod stopped")

    async def remove_pod_sandbox(self, call: Call) -> Forward | AnswerHere:
        return self._release_sandbox_after(call, api_pb2.RemovePodSandboxRequest, "pod removed")

    def _release_sandbox_after(self, call: Call, message: Any, what: str) -> Forward | AnswerHere:
        request = _parse(message, call)
        if isinstance(request, AnswerHere):
            return request

        gone = partial(self.enforcer.sandbox_gone, removed=what == "pod removed")

        async def done(response: Response) -> None:
            if response.status == OK:
                await self.worker.run(gone, request.pod_sandbox_id, what)

        return Forward(call.message, done)

    def taps(self) -> dict[str, TapFactory]:
        """Calls watched without being held up: kubelet relists every second."""
        return {
            RUNTIME + "ListContainers": self.list_containers_tap,
            RUNTIME + "Version": self.version_tap,
        }

    def version_tap(self) -> Tap:
        def answered(request: bytes, response: Response) -> None:
            if response.status == OK and response.message is not None:
                with contextlib.suppress(Exception):  # a garbled answer: the name stays
                    reply = api_pb2.VersionResponse.FromString(response.message)
                    self.runtime_name = reply.runtime_name

        return answered

    def list_containers_tap(self) -> Tap:
        # Only a listing asked for after a container was bound can prove it gone: a creation
        # may finish while the listing is under way.
        asked_at = self.enforcer.sequence

        def listed(request: bytes, response: Response) -> None:
            if response.status != OK or response.message is None:
                return
            try:
                wanted = api_pb2.ListContainersRequest.FromString(request)
            except Exception:  # not ours to judge: the runtime answered it
                return
            # kubelet's relisting sends an empty filter: only a filter that sets something
            # narrows the listing, and only an unnarrowed one shows what vanished.
            if wanted.filter.ByteSize() != 0:
                self._judge(response.message, complete=False, asked_at=asked_at)
                return
            # Complete listings come in bursts (kubelet's relisting, its stats, crictl and
            # agents): each is read whole, so one in a burst is judged, the newest, within
            # LISTING_COALESCE_SECONDS. One answer is kept, bounded by the relay's copy limit.
            first = self._pending_listing is None
            self._pending_listing = (response.message, asked_at)
            if first:
                asyncio.get_running_loop().call_later(LISTING_COALESCE_SECONDS, self._judge_pending)

        return listed

    def _judge_pending(self) -> None:
        pending, self._pending_listing = self._pending_listing, None
        if pending is not None:
            message, asked_at = pending
            try:
                self._judge(message, complete=True, asked_at=asked_at)
            except Exception:
                log.exception("judging a container listing failed")

    def _judge(self, message: bytes, *, complete: bool, asked_at: int) -> None:
        """What a listing shows, to the engine: its gone containers released, unknown ones
        adopted. Most listings change nothing: looked at here, sent to the worker when needed."""
        try:
            listed = api_pb2.ListContainersResponse.FromString(message).containers
            containers = [live_container(c) for c in listed]
        except Exception:  # not ours to judge: the runtime answered it
            return
        changed = self.enforcer.gone(containers, complete=complete, asked_at=asked_at)
        if changed or (complete and self.enforcer.unknown(containers)):
            observe = partial(self.enforcer.observed, complete=complete, asked_at=asked_at)
            self.worker.submit(observe, containers)


def _parse(message: Any, call: Call) -> Any:
    try:
        return message.FromString(call.message)
    except Exception as exc:  # a DecodeError of protobuf: the caller sent garbage
        return AnswerHere(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"{call.method}: cannot parse the request as {message.DESCRIPTOR.full_name}: {exc}",
        )
