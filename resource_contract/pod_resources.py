"""Pod-level resources (`spec.resources`, KEP-2837): the API server's defaulting and QoS class.

Pure. Follows Kubernetes 1.37 (`k8s.io/kubernetes` v1.37.2, features PodLevelResources,
PodLevelResourcesFixDefaulting and PodLevelResourcesFixKubeletQOSClass, all on by default):

- A pod "has pod-level resources" when `spec.resources` names cpu, memory or a `hugepages-*`
  resource in its requests or its limits (component-helpers' `IsPodLevelResourcesSet`); an
  empty or absent `spec.resources` leaves the containers' rules in force.
- Defaulting (`pkg/api/pod.DefaultPodLevelResources`, applied after the admission webhooks, so a
  webhook sees the pod as written): a missing pod-level request of cpu or memory is the
  containers' aggregated request (KEP-753: sidecars add up, init containers count at their
  peak), or else the pod-level limit; a missing pod-level limit is the larger of the pod-level
  request and the containers' aggregated limits, when every container has a limit for it.
- QoS (`ComputePodQOS`): with pod-level resources the pod's class is that of its pod-level
  requirements alone: Guaranteed when the request equals the limit and is not zero for both cpu
  and memory, BestEffort when both are zero for both, Burstable otherwise.

Quantities are compared as the API server parses them (Decimals).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any, Literal, NamedTuple

from resource_contract.quantities import parse_quantity

# A pod's QoS class, as kubelet names it (resource_contract.qos builds on this module).
QoSClass = Literal["Guaranteed", "Burstable", "BestEffort"]

QOS_RESOURCES = ("cpu", "memory")
HUGEPAGES_PREFIX = "hugepages-"
_ZERO = Decimal(0)


class PodContainer(NamedTuple):
    """One container as the pod-level rules see it: its requests and limits as written."""

    requests: Mapping[str, Any]
    limits: Mapping[str, Any]
    init: bool = False
    restartable: bool = False  # an init container with restartPolicy Always (a sidecar)


def is_supported(name: str) -> bool:
    """A resource that may be given at pod level: cpu, memory and hugepages."""
    return name in QOS_RESOURCES or name.startswith(HUGEPAGES_PREFIX)


def pod_level_set(requests: Mapping[str, Any] | None, limits: Mapping[str, Any] | None) -> bool:
    """Whether `spec.resources` counts as pod-level resources (`IsPodLevelResourcesSet`)."""
    return any(is_supported(k) for k in requests or ()) or any(
        is_supported(k) for k in limits or ()
    )


def _parsed(quantities: Mapping[str, Any] | None) -> dict[str, Decimal]:
    return {k: parse_quantity(v) for k, v in (quantities or {}).items()}


def container_requests(requests: Mapping[str, Any], limits: Mapping[str, Any]) -> dict[str, Any]:
    """A container's requests after the API server's defaulting: a missing request is the
    limit."""
    out = dict(requests)
    for name, limit in limits.items():
        out.setdefault(name, limit)
    return out


def _add(total: dict[str, Decimal], more: Mapping[str, Decimal]) -> None:
    for name, value in more.items():
        total[name] = total.get(name, _ZERO) + value


def _at_least(total: dict[str, Decimal], other: Mapping[str, Decimal]) -> None:
    for name, value in other.items():
        if name not in total or value > total[name]:
            total[name] = value


def aggregate(lists: Iterable[tuple[Mapping[str, Decimal], PodContainer]]) -> dict[str, Decimal]:
    """What a pod's containers need together (KEP-753): the app containers and sidecars add
    up; an init container counts with the sidecars started before it, at its peak."""
    total: dict[str, Decimal] = {}
    sidecars: dict[str, Decimal] = {}
    peak: dict[str, Decimal] = {}
    items = list(lists)
    for values, c in items:
        if not c.init:
            _add(total, values)
    for values, c in items:
        if not c.init:
            continue
        if c.restartable:
            _add(total, values)
            _add(sidecars, values)
            running = dict(sidecars)
        else:
            running = dict(values)
            _add(running, sidecars)
        _at_least(peak, running)
    _at_least(total, peak)
    return total


def default_pod_resources(
    requests: Mapping[str, Any] | None,
    limits: Mapping[str, Any] | None,
    containers: Iterable[PodContainer],
) -> tuple[dict[str, Decimal], dict[str, Decimal]]:
    """The pod-level requests and limits after the API server's defaulting (parsed). Raises
    ValueError for a quantity that does not parse."""
    pod_requests, pod_limits = _parsed(requests), _parsed(limits)
    if not pod_requests and not pod_limits:
        return pod_requests, pod_limits
    members = list(containers)
    defaulted = [(_parsed(container_requests(c.requests, c.limits)), c) for c in members]
    for name, value in aggregate(defaulted).items():
        # Hugepages cannot be overcommitted: their pod-level request is never aggregated.
        if name in QOS_RESOURCES and name not in pod_requests:
            pod_requests[name] = value
    for name, value in pod_limits.items():
        if is_supported(name):
            pod_requests.setdefault(name, value)
    candidates = [
        name
        for name in pod_requests
        if is_supported(name)
        and name not in pod_limits
        and members
        and all(name in c.limits for c in members)
    ]
    if candidates:
        limits_total = aggregate((_parsed(c.limits), c) for c in members)
        for name in candidates:
            if name in limits_total:
                pod_limits[name] = max(limits_total[name], pod_requests[name])
    return pod_requests, pod_limits


def requirements_qos(requests: Mapping[str, Decimal], limits: Mapping[str, Decimal]) -> QoSClass:
    """The QoS class of one set of requirements (`requirementsQOS`): per cpu and memory,
    request == limit != 0 is Guaranteed, both zero BestEffort; any mix is Burstable."""
    if not requests and not limits:
        return "BestEffort"
    found: set[QoSClass] = set()
    for name in QOS_RESOURCES:
        request, limit = requests.get(name, _ZERO), limits.get(name, _ZERO)
        if request != limit:
            return "Burstable"
        found.add("BestEffort" if request == _ZERO else "Guaranteed")
    return found.pop() if len(found) == 1 else "Burstable"


def pod_level_qos(
    requests: Mapping[str, Any] | None,
    limits: Mapping[str, Any] | None,
    containers: Iterable[PodContainer],
) -> QoSClass | None:
    """The QoS class a pod's pod-level resources give it, or None when it has none (then its
    containers decide, as before). Raises ValueError for a quantity that does not parse."""
    if not pod_level_set(requests, limits):
        return None
    pod_requests, pod_limits = default_pod_resources(requests, limits, containers)
    return requirements_qos(pod_requests, pod_limits)


def spec_containers(spec: Mapping[str, Any]) -> list[PodContainer]:
    """The containers of a pod spec (a plain dict), init containers first."""
    out = []
    for group, init in (("initContainers", True), ("containers", False)):
        for c in spec.get(group) or ():
            res = c.get("resources") or {}
            out.append(
                PodContainer(
                    res.get("requests") or {},
                    res.get("limits") or {},
                    init=init,
                    restartable=init and c.get("restartPolicy") == "Always",
                )
            )
    return out
