"""NRI messages to and from the core's domain values.

A pod and a container as NRI describes them become the same `ContainerCreate` the CRI relay
decodes (the pod's annotations, its cgroup parent, kubelet's Linux resources), so one decoder
and one policy serve both transports. The engine's refusals map to the gRPC status codes the
relay uses (ttrpc carries the same codes).
"""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format

from enforcer.cri import api_pb2 as cri_api
from enforcer.cri.convert import STATUS
from enforcer.decode import ContainerCreate, KubeletResources
from enforcer.decode.dra_claims import claims_from_env
from enforcer.decode.request import container_key
from enforcer.engine.model import LiveContainer, Pinning
from enforcer.nriapi import api_pb2
from enforcer.refusal import Reason

# kubelet's own container annotation (containerd passes it on): the attempt, as CRI's
# ContainerMetadata.attempt says it, which NRI does not carry.
RESTART_COUNT = "io.kubernetes.container.restartCount"
POD_UID_LABEL = "io.kubernetes.pod.uid"


def status_code(reason: Reason) -> int:
    """The ttrpc (= gRPC) status code the relay answers a refusal of this reason with."""
    return int(STATUS[reason].value[0])


def attempt_of(container: api_pb2.Container) -> int:
    try:
        return max(0, int(container.annotations.get(RESTART_COUNT, "0")))
    except ValueError:
        return 0


def kubelet_resources(res: api_pb2.LinuxResources) -> KubeletResources:
    cpu = res.cpu
    return KubeletResources(
        cpu_shares=cpu.shares.value if cpu.HasField("shares") else 0,
        cpu_quota=cpu.quota.value if cpu.HasField("quota") else 0,
        cpu_period=cpu.period.value if cpu.HasField("period") else 0,
        memory_limit=res.memory.limit.value if res.memory.HasField("limit") else 0,
        cpuset_cpus=cpu.cpus,
        cpuset_mems=cpu.mems,
    )


def container_create(pod: api_pb2.PodSandbox, container: api_pb2.Container) -> ContainerCreate:
    """What NRI tells of a container being created, in the core's terms."""
    return ContainerCreate(
        pod_uid=pod.uid,
        pod_name=pod.name,
        namespace=pod.namespace,
        container=container.name,
        annotations=dict(pod.annotations),
        cgroup_parent=pod.linux.cgroup_parent,
        resources=kubelet_resources(container.linux.resources),
        attempt=attempt_of(container),
        pod_resources=(
            kubelet_resources(pod.linux.pod_resources)
            if pod.linux.HasField("pod_resources")
            else None
        ),
        dra_claims=claims_from_env(container.env),
    )


def resources_record(res: api_pb2.LinuxResources) -> dict[str, Any]:
    """kubelet's resources as the registry keeps them: in the relay's record format (CRI's
    LinuxContainerResources as JSON), so that a state folder moves between the two modes."""
    k = kubelet_resources(res)
    message = cri_api.LinuxContainerResources(
        cpu_period=k.cpu_period,
        cpu_quota=k.cpu_quota,
        cpu_shares=k.cpu_shares,
        memory_limit_in_bytes=k.memory_limit,
        cpuset_cpus=k.cpuset_cpus,
        cpuset_mems=k.cpuset_mems,
    )
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def key_of(pod: api_pb2.PodSandbox | None, container: api_pb2.Container) -> str | None:
    uid = pod.uid if pod is not None and pod.uid else container.labels.get(POD_UID_LABEL)
    return container_key(uid, container.name, attempt_of(container)) if uid else None


def live_container(pod: api_pb2.PodSandbox | None, container: api_pb2.Container) -> LiveContainer:
    return LiveContainer(
        id=container.id,
        sandbox_id=container.pod_sandbox_id,
        key=key_of(pod, container),
        running=container.state == api_pb2.CONTAINER_RUNNING,
        exited=container.state == api_pb2.CONTAINER_STOPPED,
    )


def cpuset_update(container_id: str, pinning: Pinning) -> api_pb2.ContainerUpdate:
    """An update that moves a container to ``pinning`` and changes nothing else."""
    update = api_pb2.ContainerUpdate(container_id=container_id)
    cpu = update.linux.resources.cpu
    if pinning.cpus:
        cpu.cpus = pinning.cpus
    if pinning.mems:
        cpu.mems = pinning.mems
    return update


def adjustment(pinning: Pinning, rdt_class: str | None) -> api_pb2.ContainerAdjustment:
    """The adjustment of a container being created: its cpuset and memory nodes, and the RDT
    class where the runtime applies it."""
    adjust = api_pb2.ContainerAdjustment()
    resources = adjust.linux.resources
    if pinning.cpus:
        resources.cpu.cpus = pinning.cpus
    if pinning.mems:
        resources.cpu.mems = pinning.mems
    if rdt_class:
        resources.rdt_class.value = rdt_class
    return adjust


def event_name(payload: bytes) -> str:
    """A StateChange's event, by its name in NRI's enum (a number this API lacks: its number)."""
    try:
        number = api_pb2.StateChangeEvent.FromString(payload).event
    except Exception:
        return ""
    try:
        return api_pb2.Event.Name(number)
    except ValueError:
        return str(number)
