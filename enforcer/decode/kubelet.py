"""kubelet's conversions from a pod spec to what it asks the runtime for (pkg/kubelet/cm).

The decoder inverts them; `plan` and the kubelet emulator apply them. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from resource_contract.pod_resources import (
    aggregate,
    container_requests,
    default_pod_resources,
    is_supported,
    pod_level_set,
    spec_containers,
)
from resource_contract.quantities import int_value, milli_value, parse_quantity

MIN_SHARES = 2
SHARES_PER_CPU = 1024
QUOTA_PERIOD = 100_000  # microseconds
MIN_QUOTA = 1000


@dataclass(frozen=True)
class KubeletResources:
    """The Linux resources kubelet asked the runtime for, in kubelet's units."""

    cpu_shares: int = 0
    cpu_quota: int = 0  # <= 0: no limit
    cpu_period: int = 0  # 0: the default period
    memory_limit: int = 0  # <= 0: no limit
    cpuset_cpus: str = ""
    cpuset_mems: str = ""


def milli_cpu_to_shares(milli_cpu: int) -> int:
    """cpu.shares for a CPU request in milli-CPU (kubelet's MilliCPUToShares)."""
    return max(MIN_SHARES, milli_cpu * SHARES_PER_CPU // 1000)


def milli_cpu_to_quota(milli_cpu: int, period: int = QUOTA_PERIOD) -> int:
    """CFS quota for a CPU limit in milli-CPU; 0 means no limit (kubelet's MilliCPUToQuota)."""
    if milli_cpu <= 0:
        return 0
    return max(MIN_QUOTA, milli_cpu * period // 1000)


def requests_and_limits(container: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The container's requests after API defaulting (a missing request equals the limit), and
    its limits."""
    res = container.get("resources") or {}
    requests, limits = dict(res.get("requests") or {}), dict(res.get("limits") or {})
    for name, limit in limits.items():
        requests.setdefault(name, limit)
    return requests, limits


@dataclass(frozen=True)
class PodLevel:
    """A pod's pod-level resources after the API server's defaulting, in kubelet's units."""

    cpu_request_milli: int = 0
    cpu_limit_milli: int = 0  # 0: none
    memory_request: int = 0
    memory_limit: int = 0  # 0: none


def pod_level_of(spec: Mapping[str, Any]) -> PodLevel | None:
    """The pod-level resources of a pod spec, None when it has none."""
    resources = spec.get("resources") or {}
    requests, limits = resources.get("requests"), resources.get("limits")
    if not pod_level_set(requests, limits):
        return None
    pod_requests, pod_limits = default_pod_resources(requests, limits, spec_containers(spec))
    return pod_level_numbers(pod_requests, pod_limits)


def pod_level_numbers(requests: Mapping[str, Any], limits: Mapping[str, Any]) -> PodLevel:
    """Defaulted pod-level requests and limits (quantities) in kubelet's units."""
    return PodLevel(
        cpu_request_milli=milli_value(requests["cpu"]) if "cpu" in requests else 0,
        cpu_limit_milli=milli_value(limits["cpu"]) if "cpu" in limits else 0,
        memory_request=int_value(requests["memory"]) if "memory" in requests else 0,
        memory_limit=int_value(limits["memory"]) if "memory" in limits else 0,
    )


def container_numbers(
    requests: Mapping[str, Any], limits: Mapping[str, Any], pod: PodLevel | None = None
) -> dict[str, int]:
    """A container's CPU request and limit and memory limit as kubelet sends them (its
    requests and limits as written): with pod-level resources, a limit the container lacks is
    the pod's, and a CPU request it lacks is its CPU limit (kuberuntime's getCPULimit,
    getMemoryLimit and generateLinuxContainerResources, Kubernetes 1.37)."""
    requests = container_requests(requests, limits)
    cpu_limit = milli_value(limits["cpu"]) if "cpu" in limits else 0
    memory_limit = int_value(limits["memory"]) if "memory" in limits else 0
    if pod is not None:
        cpu_limit = cpu_limit or pod.cpu_limit_milli
        memory_limit = memory_limit or pod.memory_limit
    cpu_request = milli_value(requests["cpu"]) if "cpu" in requests else 0
    if "cpu" not in requests and pod is not None:
        cpu_request = cpu_limit
    return {
        "cpu_request_milli": cpu_request,
        "cpu_limit_milli": cpu_limit,
        "memory_limit": memory_limit,
    }


def resources_for(
    container: Mapping[str, Any], spec: Mapping[str, Any] | None = None
) -> KubeletResources:
    """What kubelet asks the runtime for, for one container of a pod spec (`spec`: the pod's,
    for its pod-level resources)."""
    res = container.get("resources") or {}
    pod = pod_level_of(spec) if spec is not None else None
    numbers = container_numbers(res.get("requests") or {}, res.get("limits") or {}, pod)
    return KubeletResources(
        cpu_shares=milli_cpu_to_shares(numbers["cpu_request_milli"]),
        cpu_quota=milli_cpu_to_quota(numbers["cpu_limit_milli"]),
        cpu_period=QUOTA_PERIOD,
        memory_limit=numbers["memory_limit"],
    )


def sandbox_resources_for(spec: Mapping[str, Any]) -> KubeletResources:
    """What kubelet puts in LinuxPodSandboxConfig.resources: the pod's requests and limits
    (its pod-level ones where it has them, else its containers' together, KEP-753), without
    the overhead (kuberuntime's calculateSandboxResources)."""
    members = spec_containers(spec)
    requests = aggregate(
        (
            {k: parse_quantity(v) for k, v in container_requests(c.requests, c.limits).items()},
            c,
        )
        for c in members
    )
    limits = aggregate(({k: parse_quantity(v) for k, v in c.limits.items()}, c) for c in members)
    resources = spec.get("resources") or {}
    if pod_level_set(resources.get("requests"), resources.get("limits")):
        pod_requests, pod_limits = default_pod_resources(
            resources.get("requests"), resources.get("limits"), members
        )
        requests.update((k, v) for k, v in pod_requests.items() if is_supported(k))
        limits.update((k, v) for k, v in pod_limits.items() if is_supported(k))
    return KubeletResources(
        cpu_shares=milli_cpu_to_shares(milli_value(requests["cpu"]) if "cpu" in requests else 0),
        cpu_quota=milli_cpu_to_quota(milli_value(limits["cpu"])) if "cpu" in limits else 0,
        cpu_period=QUOTA_PERIOD,
        memory_limit=int_value(limits["memory"]) if "memory" in limits else 0,
    )


def cgroup_parent_for(qos: str, uid: str, driver: str = "cgroupfs") -> str:
    """The pod's cgroup parent as kubelet sends it in LinuxPodSandboxConfig.cgroup_parent."""
    if driver == "cgroupfs":
        return {
            "Guaranteed": f"/kubepods/pod{uid}",
            "Burstable": f"/kubepods/burstable/pod{uid}",
            "BestEffort": f"/kubepods/besteffort/pod{uid}",
        }[qos]
    if driver == "systemd":
        escaped = uid.replace("-", "_")
        return {
            "Guaranteed": f"kubepods-pod{escaped}.slice",
            "Burstable": f"kubepods-burstable-pod{escaped}.slice",
            "BestEffort": f"kubepods-besteffort-pod{escaped}.slice",
        }[qos]
    raise ValueError(f"unknown cgroup driver {driver!r} (cgroupfs or systemd)")
