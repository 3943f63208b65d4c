"""CRI messages to and from the core's domain values, and refusal reasons to gRPC status codes."""

from __future__ import annotations

import grpc

from enforcer.cri import api_pb2
from enforcer.decode import ContainerCreate, KubeletResources
from enforcer.decode.dra_claims import claims_from_cdi
from enforcer.refusal import Reason
from resource_contract.classes import is_runtime_class_key

STATUS: dict[Reason, grpc.StatusCode] = {
    Reason.BAD_REQUEST: grpc.StatusCode.INVALID_ARGUMENT,
    Reason.FORBIDDEN: grpc.StatusCode.PERMISSION_DENIED,
    Reason.NO_ROOM: grpc.StatusCode.RESOURCE_EXHAUSTED,
    Reason.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    Reason.NOT_SUPPORTED: grpc.StatusCode.FAILED_PRECONDITION,
}


# A CreateContainer answered with one of these may have created the container all the same.
UNCERTAIN = frozenset(
    code.value[0]
    for code in (
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.UNKNOWN,
    )
)


def hide_class_annotations(request: api_pb2.CreateContainerRequest) -> None:
    """containerd applies RDT and block-I/O classes named in the beta-dialect annotations
    itself, and refuses the container where it has no RDT of its own: the enforcer applies
    them, so the runtime does not get to see them."""
    for mapping in (request.sandbox_config.annotations, request.config.annotations):
        for key in [k for k in mapping if is_runtime_class_key(k)]:
            del mapping[key]


def kubelet_resources(res: api_pb2.LinuxContainerResources) -> KubeletResources:
    return KubeletResources(
        cpu_shares=res.cpu_shares,
        cpu_quota=res.cpu_quota,
        cpu_period=res.cpu_period,
        memory_limit=res.memory_limit_in_bytes,
        cpuset_cpus=res.cpuset_cpus,
        cpuset_mems=res.cpuset_mems,
    )


def container_create(request: api_pb2.CreateContainerRequest) -> ContainerCreate:
    """What a CreateContainerRequest asks for, in the core's terms."""
    sandbox = request.sandbox_config
    meta = sandbox.metadata
    return ContainerCreate(
        pod_uid=meta.uid,
        pod_name=meta.name,
        namespace=meta.namespace,
        container=request.config.metadata.name,
        annotations=dict(sandbox.annotations),
        cgroup_parent=sandbox.linux.cgroup_parent,
        resources=kubelet_resources(request.config.linux.resources),
        attempt=request.config.metadata.attempt,
        labels=dict(sandbox.labels),
        pod_resources=(
            kubelet_resources(sandbox.linux.resources)
            if sandbox.linux.HasField("resources")
            else None
        ),
        dra_claims=claims_from_cdi(d.name for d in request.config.CDI_devices),
    )
