"""Kubernetes QoS classes: from a pod spec (as the API server does) and from a cgroup parent.

Pure functions; quantities are compared as the API server parses them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any, Literal

from resource_contract.pod_resources import pod_level_qos, spec_containers
from resource_contract.quantities import parse_quantity

QoSClass = Literal["Guaranteed", "Burstable", "BestEffort"]
_QOS_RESOURCES = ("cpu", "memory")


def _positive(quantities: Iterable[tuple[str, Any]]) -> dict[str, Decimal]:
    parsed = {k: parse_quantity(v) for k, v in quantities if k in _QOS_RESOURCES}
    return {k: v for k, v in parsed.items() if v > 0}


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
    init containers included."""
    requests: dict[str, Decimal] = {}
    limits: dict[str, Decimal] = {}
    guaranteed = True
    for container_requests, container_limits in containers:
        # Zero quantities count as absent, as in the API server's GetPodQOS.
        c_requests = _positive(container_requests)
        c_limits = _positive(container_limits)
        for name, value in c_requests.items():
            requests[name] = requests.get(name, Decimal(0)) + value
        for name, value in c_limits.items():
            limits[name] = limits.get(name, Decimal(0)) + value
        # A missing request defaults to the limit, so only explicit differences break Guaranteed.
        limited = set(c_limits) == set(_QOS_RESOURCES)
        if guaranteed and (
            not limited or any(c_requests.get(k, c_limits[k]) != c_limits[k] for k in c_limits)
        ):
            guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


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
