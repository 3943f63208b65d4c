"""NRI messages to and from the core's domain values.

A pod and a container as NRI describes them become the same `ContainerCreate` the CRI relay
decodes (the pod's annotations, its cgroup parent, kubelet's Linux resources), so one decoder
and one policy serve both transports; kubelet's resources become the registry's neutral
`KubeletRecord`, which either transport sends back (a state folder moves between the modes).
The refusals' codes are `enforcer.nri.status`'s.
"""

from __future__ import annotations

from enforcer.decode import ContainerCreate, KubeletResources
from enforcer.decode.dra_claims import claims_from_env
from enforcer.decode.request import container_key
from enforcer.engine.kubelet_record import KubeletRecord
from enforcer.engine.model import LiveContainer, Pinning
from enforcer.nriapi import api_pb2

# kubelet's own container annotation (containerd passes it on): the attempt, as CRI's
# ContainerMetadata.attempt says it, which NRI does not carry.
RESTART_COUNT = "io.kubernetes.container.restartCount"
POD_UID_LABEL = "io.kubernetes.pod.uid"


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


def record_of(res: api_pb2.LinuxResources) -> KubeletRecord:
    """kubelet's resources as the registry keeps them (what NRI tells of them: CPU and memory
    limits, cpuset and memory nodes)."""
    k = kubelet_resources(res)
    return KubeletRecord(
        cpu_period=k.cpu_period,
        cpu_quota=k.cpu_quota,
        cpu_shares=k.cpu_shares,
        memory_limit=k.memory_limit,
        cpuset_cpus=k.cpuset_cpus,
        cpuset_mems=k.cpuset_mems,
    )


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


def adjustment(
    pinning: Pinning, rdt_class: str | None, *, rdt_clos: bool = False
) -> api_pb2.ContainerAdjustment:
    """The adjustment of a container being created: its cpuset and memory nodes, and the RDT
    class where the runtime applies it: as ``linux.rdt.clos_id`` with ``rdt_clos`` (NRI v0.11
    and later, which resolve ``resources.rdt_class`` against the runtime's own RDT
    configuration), else as ``resources.rdt_class`` (v0.6.1: the CLOS, unchecked)."""
    adjust = api_pb2.ContainerAdjustment()
    resources = adjust.linux.resources
    if pinning.cpus:
        resources.cpu.cpus = pinning.cpus
    if pinning.mems:
        resources.cpu.mems = pinning.mems
    if rdt_class and rdt_clos:
        adjust.linux.rdt.clos_id.value = rdt_class
    elif rdt_class:
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
