"""CRI messages to and from the core's domain values, and refusal reasons to gRPC status codes."""

from __future__ import annotations

import grpc

from enforcer.cri import api_pb2
from enforcer.decode import ContainerCreate, KubeletResources
from enforcer.refusal import Reason

STATUS: dict[Reason, grpc.StatusCode] = {
    Reason.BAD_REQUEST: grpc.StatusCode.INVALID_ARGUMENT,
    Reason.FORBIDDEN: grpc.StatusCode.PERMISSION_DENIED,
    Reason.NO_ROOM: grpc.StatusCode.RESOURCE_EXHAUSTED,
    Reason.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    Reason.NOT_SUPPORTED: grpc.StatusCode.FAILED_PRECONDITION,
}


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
    )
