"""A container of a pod with pod-level resources: kubelet's values for it, its part of the budget.

Pure. The pod's budget comes from the resources annotation's `pod` key (`spec.resources` as
written); the API server's defaulting is applied as Kubernetes 1.37 does
(`resource_contract.pod_resources`). The annotation does not say which init containers are
sidecars, so all of them count as plain init containers in the defaulting; the pod's cgroup
parent, set by kubelet from the stored pod, still decides the QoS class where it is kubelet's.

kubelet's CPU manager (static policy, Kubernetes 1.34 to 1.37 with its default feature gates)
gives no exclusive CPUs to any container of a pod with pod-level resources: they run on the
shared CPUs. (Only with the PodLevelResourceManagers gate, alpha in 1.36 and beta but off by
default in 1.37, does such a pod get a set of CPUs of its own.) The enforcer does the same.

On shared CPUs a container is counted for its part of the pod's CPU request, so that the pod is
counted once, as the scheduler counted it: its own request, or, without one, an equal share of
what the pod's request leaves after its app containers' own requests (an init container
without a request, which runs before them, for the pod's whole request).
"""

from __future__ import annotations

from dataclasses import dataclass

from enforcer.decode.kubelet import PodLevel, container_numbers, pod_level_numbers
from resource_contract.pod_resources import (
    PodContainer,
    QoSClass,
    container_requests,
    default_pod_resources,
    pod_level_set,
    requirements_qos,
)
from resource_contract.quantities import int_value, milli_value
from resource_contract.resources import ContainerResources, ResourcesAnnotation


@dataclass(frozen=True)
class PodLevelNumbers:
    """What the decoder needs of one container of a pod with pod-level resources."""

    numbers: dict[str, int]  # cpu_request_milli, cpu_limit_milli, memory_limit, memory_request
    share_milli: int  # its part of the pod's CPU request
    qos: QoSClass  # the pod's, by its pod-level resources


def _own(entry: ContainerResources, name: str) -> int | None:
    """The container's own request of cpu (milli) or memory (bytes), after defaulting."""
    requests = container_requests(entry.requests, entry.limits)
    if name not in requests:
        return None
    return milli_value(requests[name]) if name == "cpu" else int_value(requests[name])


def _share(
    annotation: ResourcesAnnotation, entry: ContainerResources, init: bool, name: str, pod: int
) -> int:
    own = _own(entry, name)
    if own is not None:
        return own
    if init:
        return pod
    explicit, bare = 0, 0
    for other in annotation.containers.values():
        value = _own(other, name)
        if value is None:
            bare += 1
        else:
            explicit += value
    return -(-max(0, pod - explicit) // max(bare, 1))


def pod_level_numbers_for(
    annotation: ResourcesAnnotation, container: str
) -> PodLevelNumbers | None:
    """The container's numbers when its pod has pod-level resources, else None. Raises
    ValueError or ArithmeticError for a quantity that does not parse."""
    pod = annotation.pod
    if pod is None or not pod_level_set(pod.requests, pod.limits):
        return None
    init = container not in annotation.containers
    entry = annotation.get(container)
    if entry is None:
        return None
    members = [
        PodContainer(c.requests, c.limits, init=True) for c in annotation.initContainers.values()
    ]
    members += [PodContainer(c.requests, c.limits) for c in annotation.containers.values()]
    requests, limits = default_pod_resources(pod.requests, pod.limits, members)
    budget: PodLevel = pod_level_numbers(requests, limits)
    numbers = container_numbers(entry.requests, entry.limits, budget)
    memory = _share(annotation, entry, init, "memory", budget.memory_request)
    if numbers["memory_limit"]:
        memory = min(memory, numbers["memory_limit"])
    numbers["memory_request"] = memory
    share = _share(annotation, entry, init, "cpu", budget.cpu_request_milli)
    return PodLevelNumbers(numbers, share, requirements_qos(requests, limits))
