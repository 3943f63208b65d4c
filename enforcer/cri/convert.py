"""CRI messages to and from the engine's domain values (every conversion of the CRI transport).

A CreateContainerRequest becomes a `ContainerCreate`; kubelet's LinuxContainerResources become
the registry's neutral `KubeletRecord` and back (`record_of`, `resources_message`); a listed
container becomes a `LiveContainer`; a re-pin becomes an UpdateContainerResourcesRequest.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, MutableMapping
from dataclasses import replace
from typing import Any

from enforcer.cri import api_pb2
from enforcer.decode import ContainerCreate, KubeletResources
from enforcer.decode.dra_claims import claims_from_cdi
from enforcer.decode.request import container_key
from enforcer.engine.kubelet_record import KubeletRecord
from enforcer.engine.model import LiveContainer, Pinning
from enforcer.engine.ports import RecordUnusable
from resource_contract.classes import is_runtime_class_key


def hide_class_annotations(request: api_pb2.CreateContainerRequest) -> None:
    """containerd applies RDT and block-I/O classes named in the beta-dialect annotations
    itself, and refuses the container where it has no RDT of its own: the enforcer applies
    them, so the runtime does not get to see them."""
    for mapping in (request.sandbox_config.annotations, request.config.annotations):
        _drop_runtime_class_keys(mapping)


def hide_sandbox_class_annotations(request: api_pb2.RunPodSandboxRequest) -> bool:
    """CRI-O reads those annotations from the sandbox as RunPodSandbox gave them, not from
    the CreateContainer that follows: they are hidden there too. True when any was."""
    return _drop_runtime_class_keys(request.config.annotations)


def _drop_runtime_class_keys(mapping: MutableMapping[str, str]) -> bool:
    keys = [k for k in mapping if is_runtime_class_key(k)]
    for key in keys:
        del mapping[key]
    return bool(keys)


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


def record_of(res: api_pb2.LinuxContainerResources) -> KubeletRecord:
    """kubelet's resources as the registry keeps them."""
    return KubeletRecord(
        cpu_period=res.cpu_period,
        cpu_quota=res.cpu_quota,
        cpu_shares=res.cpu_shares,
        memory_limit=res.memory_limit_in_bytes,
        memory_swap_limit=res.memory_swap_limit_in_bytes,
        oom_score_adj=res.oom_score_adj,
        cpuset_cpus=res.cpuset_cpus,
        cpuset_mems=res.cpuset_mems,
        hugepage_limits=tuple((h.page_size, h.limit) for h in res.hugepage_limits),
        unified=tuple(res.unified.items()),
    )


def resources_message(record: KubeletRecord) -> api_pb2.LinuxContainerResources:
    """The registry's record as CRI's LinuxContainerResources."""
    message = api_pb2.LinuxContainerResources(
        cpu_period=record.cpu_period,
        cpu_quota=record.cpu_quota,
        cpu_shares=record.cpu_shares,
        memory_limit_in_bytes=record.memory_limit,
        memory_swap_limit_in_bytes=record.memory_swap_limit,
        oom_score_adj=record.oom_score_adj,
        cpuset_cpus=record.cpuset_cpus,
        cpuset_mems=record.cpuset_mems,
        unified=dict(record.unified),
    )
    for size, limit in record.hugepage_limits:
        message.hugepage_limits.add(page_size=size, limit=limit)
    return message


def repinned(record: KubeletRecord, pinning: Pinning) -> KubeletRecord:
    """The record as a re-pin over CRI sends it: the cpuset and memory nodes are the pinning's
    ("" leaves the runtime's value: CRI's UpdateContainerResources ignores an empty one)."""
    return replace(record, cpuset_cpus=pinning.cpus, cpuset_mems=pinning.mems)


def update_request(
    container_id: str, record: KubeletRecord, pinning: Pinning
) -> api_pb2.UpdateContainerResourcesRequest:
    """The UpdateContainerResources call that moves a container to `pinning`, with kubelet's
    resources from the registry's record. RecordUnusable when the record cannot be sent, as
    one read damaged from a saved state (the engine then takes the runtime's own record)."""
    if record.damage is not None:
        raise RecordUnusable(
            f"UpdateContainerResources {container_id}: the saved record of kubelet's "
            f"resources cannot be sent: {record.damage}"
        )
    return api_pb2.UpdateContainerResourcesRequest(
        container_id=container_id, linux=resources_message(repinned(record, pinning))
    )


def request_from_statuses(
    sandbox: api_pb2.PodSandboxStatus, container: api_pb2.ContainerStatus, spec: Mapping[str, Any]
) -> api_pb2.CreateContainerRequest | None:
    """The CreateContainer a running container was made with, rebuilt from what a runtime whose
    verbose status carries no creation config (CRI-O) does report: the sandbox's and the
    container's status (metadata, labels, annotations, the resources applied) and the cgroup
    parent from the OCI spec's ``cgroupsPath``. The cpuset is left empty: the status has the one
    applied, not kubelet's; CDI devices are not reported. None without the pod's metadata or
    the container's resources."""
    if not sandbox.metadata.uid or not container.HasField("resources"):
        return None
    if not container.resources.HasField("linux"):
        return None
    request = api_pb2.CreateContainerRequest(pod_sandbox_id=sandbox.id)
    box = request.sandbox_config
    box.metadata.CopyFrom(sandbox.metadata)
    box.labels.update(sandbox.labels)
    box.annotations.update(sandbox.annotations)
    box.linux.cgroup_parent = cgroup_parent(spec)
    config = request.config
    config.metadata.CopyFrom(container.metadata)
    config.labels.update(container.labels)
    config.annotations.update(container.annotations)
    config.linux.resources.CopyFrom(container.resources.linux)
    config.linux.resources.cpuset_cpus = ""
    config.linux.resources.cpuset_mems = ""
    return request


def cgroup_parent(spec: Mapping[str, Any]) -> str:
    """The pod's cgroup from a container's OCI ``cgroupsPath``: the folder above it (cgroupfs,
    ``/kubepods/burstable/pod<uid>/crio-<id>``) or the slice (systemd,
    ``kubepods-burstable-pod<uid>.slice:crio:<id>``); "" when the spec has none."""
    linux = spec.get("linux")
    path = linux.get("cgroupsPath") if isinstance(linux, dict) else None
    if not isinstance(path, str) or not path:
        return ""
    if ":" in path:
        return path.split(":", 1)[0]
    return posixpath.dirname(path.rstrip("/"))


def live_container(c: api_pb2.Container) -> LiveContainer:
    uid = c.labels.get("io.kubernetes.pod.uid")
    return LiveContainer(
        id=c.id,
        sandbox_id=c.pod_sandbox_id,
        key=container_key(uid, c.metadata.name, c.metadata.attempt) if uid else None,
        running=c.state == api_pb2.CONTAINER_RUNNING,
        # CONTAINER_UNKNOWN is not exited: the runtime lost sight of it, it may still run.
        exited=c.state == api_pb2.CONTAINER_EXITED,
    )
