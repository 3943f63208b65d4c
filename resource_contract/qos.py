"""Kubernetes QoS classes: from a pod spec (as the API server does) and from a cgroup parent.

Pure functions; quantities are compared as the API server parses them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from resource_contract.pod_resources import (
    QoSClass,
    pod_level_qos,
    requirements_qos,
    spec_containers,
)
from resource_contract.quantities import parse_quantity

_QOS_RESOURCES = ("cpu", "memory")
_ZERO = Decimal(0)


def qos_class(spec: Mapping[str, Any]) -> QoSClass:
    """The pod's QoS class by the API server's rules: from its pod-level resources
    (`spec.resources`) when it has them, else over containers and init containers."""
    pod = spec.get("resources") or {}
    by_pod = pod_level_qos(pod.get("requests"), pod.get("limits"), spec_containers(spec))
    if by_pod is not None:
        return by_pod
    containers = []
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        resources = container.get("resources") or {}
        containers.append(
            (
                (resources.get("requests") or {}).items(),
                (resources.get("limits") or {}).items(),
            )
        )
    return qos_of_containers(containers)


def qos_of_containers(
    containers: Iterable[tuple[Iterable[tuple[str, Any]], Iterable[tuple[str, Any]]]],
) -> QoSClass:
    """qos_class over (requests, limits) pairs of (resource, quantity), one per container,
    init containers included, as written (`ComputePodQOS` without pod-level resources).

    Each container is classed by its requirements after the API server's defaulting (a
    missing request is its limit; an explicit "0" stays 0): Guaranteed when request == limit
    != 0 for both cpu and memory, BestEffort when both are zero for both, else Burstable. All
    Guaranteed make a Guaranteed pod, all BestEffort a BestEffort one, any mix Burstable."""
    found: set[QoSClass] = set()
    for container_requests, container_limits in containers:
        # Only cpu and memory are read; the other names only count as present.
        limits = {k: _quantity(k, v) for k, v in container_limits}
        requests = {k: _quantity(k, v) for k, v in container_requests}
        for name, value in limits.items():
            requests.setdefault(name, value)
        found.add(requirements_qos(requests, limits))
        if "Burstable" in found or len(found) > 1:
            return "Burstable"
    return found.pop() if found else "BestEffort"


def _quantity(name: str, value: Any) -> Decimal:
    return parse_quantity(value) if name in _QOS_RESOURCES else _ZERO


_SYSTEMD_QOS = re.compile(r"kubepods-(burstable|besteffort)-pod|kubepods-pod")


def qos_from_cgroup_parent(parent: str) -> QoSClass | None:
    """QoS class from kubelet's cgroup parent, cgroupfs (`/kubepods/burstable/pod…`) or systemd
    (`kubepods-burstable-pod…slice`) form; None when the parent is not kubelet's."""
    parts = [p for p in parent.split("/") if p]
    if "kubepods" in parts:
        after = parts[parts.index("kubepods") + 1 :]
        if after and after[0] == "burstable":
            return "Burstable"
        if after and after[0] == "besteffort":
            return "BestEffort"
        if after and after[0].startswith("pod"):
            return "Guaranteed"
        return None
    last = parts[-1] if parts else ""
    match = _SYSTEMD_QOS.search(last)
    if not match:
        return None
    by_group: dict[str | None, QoSClass] = {
        "burstable": "Burstable",
        "besteffort": "BestEffort",
        None: "Guaranteed",
    }
    return by_group[match.group(1)]
