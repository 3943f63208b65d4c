"""What kubelet sends for a Pod manifest, with the cgroupfs driver (see FACTS.md, "What kubelet
sends"): the pod's QoS class, kubelet's CPU shares, CFS quota/period, memory limit and OOM score
adjustment, the ``PodSandboxConfig`` and each ``ContainerConfig``. Pure: no runtime needed."""

from __future__ import annotations

import json
import os
import uuid
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from enforcer.cri import api_pb2
from enforcer.decode.kubelet import (
    cgroup_parent_for,
    pod_level_of,
    requests_and_limits,
    resources_for,
    sandbox_resources_for,
)
from resource_contract.qos import qos_class
from resource_contract.quantities import int_value

Pod = Mapping[str, Any]
Container = Mapping[str, Any]

GUARANTEED = "Guaranteed"
BURSTABLE = "Burstable"
BEST_EFFORT = "BestEffort"

# Kubelet's constants (pkg/kubelet/qos).
GUARANTEED_OOM_SCORE_ADJ = -997
BEST_EFFORT_OOM_SCORE_ADJ = 1000

# Labels kubelet puts on every sandbox and container.
LABEL_CONTAINER_NAME = "io.kubernetes.container.name"
LABEL_POD_NAME = "io.kubernetes.pod.name"
LABEL_POD_NAMESPACE = "io.kubernetes.pod.namespace"
LABEL_POD_UID = "io.kubernetes.pod.uid"

_QOS_RESOURCES = ("cpu", "memory")  # the only resources that count for the QoS class


# -- resources and QoS ----------------------------------------------------------------------


def effective_requests(container: Container) -> dict[str, Any]:
    """The container's requests after API defaulting: a missing request equals the limit."""
    return requests_and_limits(container)[0]


def all_containers(pod: Pod) -> list[Container]:
    spec = pod.get("spec") or {}
    return list(spec.get("initContainers") or []) + list(spec.get("containers") or [])


def pod_qos_class(pod: Pod) -> str:
    """The pod's QoS class by Kubernetes' rules (init containers included)."""
    return qos_class(pod.get("spec") or {})


def node_memory_capacity() -> int:
    """MemTotal of this machine in bytes (kubelet's memory capacity, for oom_score_adj)."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("MemTotal not found in /proc/meminfo")


def oom_score_adj(qos: str, container: Container, memory_capacity: int) -> int:
    """Kubelet's per-container OOM score adjustment."""
    if qos == GUARANTEED:
        return GUARANTEED_OOM_SCORE_ADJ
    if qos == BEST_EFFORT:
        return BEST_EFFORT_OOM_SCORE_ADJ
    mem = effective_requests(container).get("memory")
    request = int_value(mem) if mem is not None else 0
    adj = 1000 - (1000 * request) // memory_capacity
    # Burstable stays strictly between Guaranteed and BestEffort.
    if adj < 1000 + GUARANTEED_OOM_SCORE_ADJ:
        return 1000 + GUARANTEED_OOM_SCORE_ADJ
    if adj == BEST_EFFORT_OOM_SCORE_ADJ:
        return adj - 1
    return adj


def linux_resources(
    container: Container,
    qos: str | None = None,
    memory_capacity: int | None = None,
    spec: Mapping[str, Any] | None = None,
) -> api_pb2.LinuxContainerResources:
    """The LinuxContainerResources kubelet sends for ``container``.

    ``qos`` and ``memory_capacity`` only matter for ``oom_score_adj``; without ``qos`` that
    field stays 0 (unset). ``spec``: the pod's, for its pod-level resources (a container
    without a limit gets the pod's).
    """
    wanted = resources_for(container, spec)
    res = api_pb2.LinuxContainerResources(
        cpu_period=wanted.cpu_period,
        cpu_quota=wanted.cpu_quota,
        cpu_shares=wanted.cpu_shares,
        memory_limit_in_bytes=wanted.memory_limit,
    )
    if qos is not None:
        capacity = memory_capacity if memory_capacity is not None else node_memory_capacity()
        res.oom_score_adj = oom_score_adj(qos, container, capacity)
    return res


# -- what kubelet sends (pure) ----------------------------------------------------------------


def _namespace_options(spec: Mapping[str, Any]) -> api_pb2.NamespaceOption:
    # Host networking always: no CNI plugin is needed (see the class docstring).
    return api_pb2.NamespaceOption(
        network=api_pb2.NODE,
        pid=api_pb2.NODE if spec.get("hostPID") else api_pb2.CONTAINER,
        ipc=api_pb2.NODE if spec.get("hostIPC") else api_pb2.POD,
    )


def sandbox_config_for(
    pod: Pod,
    uid: str | None = None,
    attempt: int = 0,
    *,
    log_root: str | os.PathLike[str] = "/var/log/pods",
    cgroup_driver: str = "cgroupfs",
) -> api_pb2.PodSandboxConfig:
    """The PodSandboxConfig kubelet derives from ``pod``."""
    meta = pod.get("metadata") or {}
    name = meta.get("name", "pod")
    namespace = meta.get("namespace", "default")
    uid = uid or meta.get("uid") or str(uuid.uuid4())
    qos = pod_qos_class(pod)
    labels = dict(meta.get("labels") or {})
    labels.update({LABEL_POD_NAME: name, LABEL_POD_NAMESPACE: namespace, LABEL_POD_UID: uid})
    spec = pod.get("spec") or {}
    config = api_pb2.PodSandboxConfig(
        metadata=api_pb2.PodSandboxMetadata(
            name=name, uid=uid, namespace=namespace, attempt=attempt
        ),
        log_directory=str(Path(log_root) / f"{namespace}_{name}_{uid}"),
        labels=labels,
        annotations=dict(meta.get("annotations") or {}),
        linux=api_pb2.LinuxPodSandboxConfig(
            cgroup_parent=cgroup_parent_for(qos, uid, cgroup_driver),
            security_context=api_pb2.LinuxSandboxSecurityContext(
                namespace_options=_namespace_options(spec),
            ),
        ),
    )
    if pod_level_of(spec) is not None:
        # kubelet sends every pod's resources here (calculateSandboxResources); the emulator
        # only those of pods with pod-level resources, where the enforcer reads them.
        pod_res = sandbox_resources_for(spec)
        config.linux.resources.CopyFrom(
            api_pb2.LinuxContainerResources(
                cpu_period=pod_res.cpu_period,
                cpu_quota=pod_res.cpu_quota,
                cpu_shares=pod_res.cpu_shares,
                memory_limit_in_bytes=pod_res.memory_limit,
            )
        )
    return config


def container_config_for(
    pod: Pod,
    container: Container,
    uid: str,
    attempt: int = 0,
    *,
    memory_capacity: int | None = None,
) -> api_pb2.ContainerConfig:
    """The ContainerConfig kubelet derives for one (init) container of ``pod``."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    name = container["name"]
    qos = pod_qos_class(pod)
    envs = [
        api_pb2.KeyValue(key=e["name"], value=str(e.get("value", "")))
        for e in container.get("env") or []
        if "valueFrom" not in e
    ]
    grace = spec.get("terminationGracePeriodSeconds", 30)
    return api_pb2.ContainerConfig(
        metadata=api_pb2.ContainerMetadata(name=name, attempt=attempt),
        image=api_pb2.ImageSpec(image=container["image"], user_specified_image=container["image"]),
        command=list(container.get("command") or []),
        args=list(container.get("args") or []),
        working_dir=container.get("workingDir", ""),
        envs=envs,
        labels={
            LABEL_CONTAINER_NAME: name,
            LABEL_POD_NAME: meta.get("name", "pod"),
            LABEL_POD_NAMESPACE: meta.get("namespace", "default"),
            LABEL_POD_UID: uid,
        },
        # Kubelet's own bookkeeping; pod annotations are NOT copied here.
        annotations={
            "io.kubernetes.container.hash": container_hash(container),
            "io.kubernetes.container.restartCount": str(attempt),
            "io.kubernetes.container.terminationMessagePath": container.get(
                "terminationMessagePath", "/dev/termination-log"
            ),
            "io.kubernetes.container.terminationMessagePolicy": container.get(
                "terminationMessagePolicy", "File"
            ),
            "io.kubernetes.pod.terminationGracePeriod": str(grace),
        },
        log_path=f"{name}/{attempt}.log",
        stdin=bool(container.get("stdin")),
        stdin_once=bool(container.get("stdinOnce")),
        tty=bool(container.get("tty")),
        linux=api_pb2.LinuxContainerConfig(
            resources=linux_resources(container, qos, memory_capacity, spec),
            security_context=api_pb2.LinuxContainerSecurityContext(
                namespace_options=_namespace_options(spec),
                privileged=bool((container.get("securityContext") or {}).get("privileged")),
            ),
        ),
    )


def container_hash(container: Container) -> str:
    # Kubelet hashes the container spec to notice changes; any stable hash does here.
    data = json.dumps(container, sort_keys=True, default=str).encode()
    return format(zlib.crc32(data), "x")
