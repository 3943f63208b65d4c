"""The plugin service's per-event calls of NRI v0.12 and later, mapped onto v0.6.1's events.

NRI v0.6.1 (containerd 1.7) tells the plugin of pods and of a container's start and removal
through StateChange; v0.12 and later call a method per event (RunPodSandbox, StartContainer,
RemoveContainer, ...) and fall back to StateChange, with a deprecation warning (containerd:
`ctr deprecations list`), only for a plugin that answers the method unimplemented. Each such
request is the StateChange event's pod and container under other field numbers, and each
answer is an empty message: one handler per method turns the request into the event and
answers nothing, so both runtimes reach the same code.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from google.protobuf.message import Message

from enforcer.nriapi import api_pb2

log = logging.getLogger(__name__)
E = api_pb2.Event
# method -> (its request message, the StateChange event it stands for)
PER_EVENT: dict[str, tuple[type[Message], int]] = {
    "RunPodSandbox": (api_pb2.RunPodSandboxRequest, E.RUN_POD_SANDBOX),
    "StopPodSandbox": (api_pb2.StopPodSandboxRequest, E.STOP_POD_SANDBOX),
    "RemovePodSandbox": (api_pb2.RemovePodSandboxRequest, E.REMOVE_POD_SANDBOX),
    "PostCreateContainer": (api_pb2.PostCreateContainerRequest, E.POST_CREATE_CONTAINER),
    "StartContainer": (api_pb2.StartContainerRequest, E.START_CONTAINER),
    "PostStartContainer": (api_pb2.PostStartContainerRequest, E.POST_START_CONTAINER),
    "PostUpdateContainer": (api_pb2.PostUpdateContainerRequest, E.POST_UPDATE_CONTAINER),
    "RemoveContainer": (api_pb2.RemoveContainerRequest, E.REMOVE_CONTAINER),
}
EventSink = Callable[[api_pb2.StateChangeEvent], Awaitable[None]]


def as_state_change(method: str, payload: bytes) -> api_pb2.StateChangeEvent:
    """A per-event request as the StateChange a v0.6.1 runtime sends for it."""
    message_type, event = PER_EVENT[method]
    request = message_type.FromString(payload)
    change = api_pb2.StateChangeEvent(event=event)  # type: ignore[arg-type]
    change.pod.CopyFrom(request.pod)  # type: ignore[attr-defined]
    if "container" in request.DESCRIPTOR.fields_by_name:  # pod events have none
        change.container.CopyFrom(request.container)  # type: ignore[attr-defined]
    return change


def per_event_handler(method: str, sink: EventSink) -> Callable[[bytes], Awaitable[bytes]]:
    """The handler of one per-event method: the event to ``sink``, an empty answer."""
    if method not in PER_EVENT:
        raise KeyError(f"{method} is not a per-event NRI method")

    async def handle(payload: bytes) -> bytes:
        await sink(as_state_change(method, payload))
        return b""  # every per-event answer is an empty message

    return handle


def updated_pod(payload: bytes) -> api_pb2.PodSandbox:
    """UpdatePodSandbox (v0.10 and later: a pod's pod-level resources resized in place): the
    pod with its new pod-level resources. Its containers run on the shared CPUs (pod-level
    resources give no exclusive CPUs), so the plugin only records it."""
    request = api_pb2.UpdatePodSandboxRequest.FromString(payload)
    pod = request.pod
    if request.HasField("linux_resources"):
        pod.linux.pod_resources.CopyFrom(request.linux_resources)
    log.info("pod %s/%s: pod-level resources updated", pod.namespace, pod.name)
    return pod
