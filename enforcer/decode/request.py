"""Decoding a runtime's container creation into a ContainerRequest: what the container asked for.

The annotations tell what the pod spec said; kubelet's CRI values tell what kubelet will
enforce. The annotation is preferred (it keeps requests kubelet folds away, such as memory
requests), but only while it agrees with the CRI values: a pod's author can write any
annotation, kubelet's values they cannot.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from enforcer.decode.class_settings import ClassSettings
from enforcer.decode.kubelet import (
    MIN_SHARES,
    QUOTA_PERIOD,
    KubeletResources,
    milli_cpu_to_quota,
    milli_cpu_to_shares,
)
from enforcer.decode.machine import Machine
from enforcer.decode.pod_level import PodLevelNumbers, pod_level_numbers_for
from enforcer.refusal import Reason, Refusal
from enforcer.topology import CPUSet
from resource_contract.affinity import AffinityError, AffinityTerm, resolve_affinity
from resource_contract.balloons import (
    resolve_balloon,
    validate_balloon_annotations,
)
from resource_contract.classes import (
    ClassKind,
    ClassRequest,
    ClassRequestError,
    resolve_class,
    validate_class_annotations,
)
from resource_contract.cpu_classes import (
    resolve_cpu_class,
    validate_cpu_class_annotations,
)
from resource_contract.keys import RESOURCES_KEYS
from resource_contract.pod_resources import QoSClass
from resource_contract.preferences import (
    PreferenceError,
    PreferenceForbidden,
    check_preference_access,
    resolve_preference,
    validate_preference_annotations,
)
from resource_contract.qos import qos_from_cgroup_parent
from resource_contract.quantities import int_value, milli_value
from resource_contract.resources import ResourcesAnnotation, ResourcesAnnotationError
from resource_contract.task_classes import validate_task_class_annotations

DEFAULT_PERIOD = QUOTA_PERIOD


def container_key(pod_uid: str, container: str, attempt: int = 0) -> str:
    """A container's key in the registry: stable across kubelet's retries of one creation (the
    runtime's id is not known until it answers), distinct for each attempt (a restarted
    container is a new one, and a cut-off attempt may still run beside the next)."""
    return f"{pod_uid}/{container}" if not attempt else f"{pod_uid}/{container}#{attempt}"


@dataclass(frozen=True)
class ContainerCreate:
    """A runtime's request to create one container, as any transport delivers it."""

    pod_uid: str
    pod_name: str
    namespace: str
    container: str
    annotations: Mapping[str, str]  # the pod's
    cgroup_parent: str  # the pod's, as kubelet set it
    resources: KubeletResources
    attempt: int = 0
    labels: Mapping[str, str] = field(default_factory=dict)  # the pod's
    # The pod's own resources as kubelet sent them with the sandbox (its requests and limits
    # together, or its pod-level ones), when the runtime passes them on.
    pod_resources: KubeletResources | None = None
    # The uids of the prepared DRA claims of ours it names (enforcer.decode.dra_claims).
    dra_claims: tuple[str, ...] = ()


# The metadata of a field that holds a count, never negative: a saved state's checks
# (enforcer.state.saved) refuse an entry where one is.
COUNT: Mapping[str, object] = MappingProxyType({"minimum": 0})


@dataclass(frozen=True)
class Preferences:
    isolated: bool | None = None
    shared: bool | None = None
    reserved: bool | None = None
    preserve: bool | None = None


@dataclass(frozen=True)
class ContainerRequest:
    """What one container asked for, whichever way we learnt it."""

    pod_uid: str
    pod_name: str
    namespace: str
    container: str
    qos: QoSClass
    cpu_request_milli: int = field(default=0, metadata=COUNT)
    cpu_limit_milli: int = field(default=0, metadata=COUNT)  # 0: no limit
    memory_request: int = field(default=0, metadata=COUNT)
    memory_limit: int = field(default=0, metadata=COUNT)  # 0: no limit
    attempt: int = field(default=0, metadata=COUNT)
    source: str = "cri"  # the annotation key the numbers came from, or "cri"
    preferences: Preferences = field(default_factory=Preferences)
    rdt_class: str | None = None
    blockio_class: str | None = None
    # Asked for by an annotation (a failure to apply it refuses the container), rather than
    # the QoS-class default (skipped quietly where it cannot apply).
    rdt_explicit: bool = False
    blockio_explicit: bool = False
    # What kubelet asked for, checked against the machine; `cpu.preserve` keeps it.
    kubelet_cpus: CPUSet = field(default_factory=CPUSet)
    kubelet_mems: CPUSet = field(default_factory=CPUSet)
    # The balloon type its annotations ask for (read by the balloons policy only).
    balloon: str | None = None
    # Its affinity and anti-affinity rules, and its pod's labels (which others' rules read).
    affinity: tuple[AffinityTerm, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    # The CPU class its annotations ask for its exclusive CPUs (read by topology-aware).
    cpu_class: str | None = None
    # Its pod has pod-level resources (spec.resources): like kubelet's static policy, no
    # exclusive CPUs; on shared CPUs it counts for `pod_share_milli`, its part of the pod's
    # CPU request (enforcer.decode.pod_level).
    pod_level: bool = False
    pod_share_milli: int = field(default=0, metadata=COUNT)
    # The scheduling and memory classes its annotations ask for (a balloon type's otherwise).
    scheduling_class: str | None = None
    memory_class: str | None = None
    # Its devices (device plugins' "resource=id", DRA's "driver/pool/device") and their NUMA
    # nodes, read from kubelet's pod-resources API by the shell before the decision
    # (enforcer.podresources); policy.preferCloseToDevices places it on those nodes.
    devices: tuple[str, ...] = ()
    device_nodes: tuple[int, ...] = ()

    @property
    def key(self) -> str:
        """The registry's key (see `container_key`)."""
        return container_key(self.pod_uid, self.container, self.attempt)

    @property
    def exclusive_eligible(self) -> bool:
        """Whether its QoS class lets it have CPUs of its own: Guaranteed, in a pod without
        pod-level resources."""
        return self.qos == "Guaranteed" and not self.pod_level

    @property
    def exclusive_cpus(self) -> int:
        """Whole CPUs a Guaranteed container may have for itself (0 when not eligible)."""
        if not self.exclusive_eligible or self.cpu_request_milli % 1000:
            return 0
        return self.cpu_request_milli // 1000

    @property
    def shared_milli(self) -> int:
        """The milli-CPU it is counted for on shared CPUs: its request, or in a pod with
        pod-level resources its part of the pod's."""
        return self.pod_share_milli if self.pod_level else self.cpu_request_milli


class DecodeError(Refusal):
    """A request that must be refused: malformed (BAD_REQUEST) or not allowed (FORBIDDEN)."""


def estimate_from_cri(res: KubeletResources) -> dict[str, int]:
    """Requests and limits as kubelet derived them, inverted."""
    period = res.cpu_period or DEFAULT_PERIOD
    cpu_limit = math.ceil(res.cpu_quota * 1000 / period) if res.cpu_quota > 0 else 0
    # The smallest milli-CPU giving these shares; the minimum (BestEffort's) means no request.
    cpu_request = 0 if res.cpu_shares <= MIN_SHARES else math.ceil(res.cpu_shares * 1000 / 1024)
    memory_limit = max(res.memory_limit, 0)
    # CRI carries no memory request; a container whose CPU request equals its limit is taken
    # to be Guaranteed, whose memory request equals its limit.
    guaranteed = (
        cpu_limit > 0 and memory_limit > 0 and milli_cpu_to_shares(cpu_limit) == res.cpu_shares
    )
    return {
        "cpu_request_milli": cpu_request,
        "cpu_limit_milli": cpu_limit,
        "memory_limit": memory_limit,
        "memory_request": memory_limit if guaranteed else 0,
    }


def _from_annotation(
    entry: Mapping[str, Mapping[str, str]],
) -> dict[str, int]:
    requests, limits = entry["requests"], entry["limits"]
    cpu_limit = milli_value(limits["cpu"]) if "cpu" in limits else 0
    mem_limit = int_value(limits["memory"]) if "memory" in limits else 0
    # The API server defaults a missing request to the limit.
    cpu_request = milli_value(requests["cpu"]) if "cpu" in requests else cpu_limit
    mem_request = int_value(requests["memory"]) if "memory" in requests else mem_limit
    return {
        "cpu_request_milli": cpu_request,
        "cpu_limit_milli": cpu_limit,
        "memory_limit": mem_limit,
        "memory_request": mem_request,
    }


def _impossible(numbers: Mapping[str, int]) -> str | None:
    """What the API server would never have admitted: negative values, requests over limits."""
    if any(v < 0 for v in numbers.values()):
        return "a negative quantity"
    if numbers["cpu_limit_milli"] and numbers["cpu_request_milli"] > numbers["cpu_limit_milli"]:
        return "a CPU request above its limit"
    if numbers["memory_limit"] and numbers["memory_request"] > numbers["memory_limit"]:
        return "a memory request above its limit"
    return None


def _contradiction(numbers: Mapping[str, int], res: KubeletResources) -> str | None:
    """How the annotation's numbers disagree with kubelet's, or None."""
    if impossible := _impossible(numbers):
        return impossible
    period = res.cpu_period or DEFAULT_PERIOD
    expected = {
        "cpu_shares": milli_cpu_to_shares(numbers["cpu_request_milli"]),
        "cpu_quota": milli_cpu_to_quota(numbers["cpu_limit_milli"], period),
        "memory_limit_in_bytes": numbers["memory_limit"],
    }
    actual = {
        "cpu_shares": res.cpu_shares,
        "cpu_quota": max(res.cpu_quota, 0),
        "memory_limit_in_bytes": max(res.memory_limit, 0),
    }
    wrong = [
        f"{k} {actual[k]} (annotation implies {v})" for k, v in expected.items() if actual[k] != v
    ]
    return ", ".join(wrong) or None


def _beyond_capacity(numbers: Mapping[str, int], machine: Machine | None) -> str | None:
    """Requests the node could never hold, or None. (Limits may exceed the node, as Kubernetes
    allows; kubelet's own values confirm them.)"""
    if machine is None:
        return None
    cpu, memory = numbers["cpu_request_milli"], numbers["memory_request"]
    if cpu > machine.cpu_milli:
        return f"a CPU request of {cpu}m, above the node's {len(machine.cpus)} CPUs"
    if machine.memory_bytes and memory > machine.memory_bytes:
        return f"a memory request of {memory} bytes, above the node's {machine.memory_bytes} bytes"
    return None


def _kubelet_cpuset(text: str, field: str, known: CPUSet | None, what: str, where: str) -> CPUSet:
    """kubelet's `cpuset_cpus` or `cpuset_mems`, parsed and checked against the machine."""
    shown = _clipped(text)
    try:
        ids = CPUSet.parse(text)
    except ValueError as exc:
        # CPUSet's message repeats the text: shown once, clipped.
        why = _clipped(str(exc).removeprefix(f"invalid CPU list {text!r}: "))
        raise DecodeError(
            Reason.BAD_REQUEST, f'{where} {field} "{shown}" is not a {what} list: {why}'
        ) from None
    if known is not None and (outside := ids - known):
        raise DecodeError(
            Reason.BAD_REQUEST,
            f'{where} {field} "{shown}" names {what}s {outside}, which this machine does not '
            f"have (it has {known or 'none'})",
        )
    return ids


_SHOWN = 80  # characters of a bad value quoted in a message


def _clipped(text: str) -> str:
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "..."


def _borrowed_budget(
    numbers: Mapping[str, int], pod: KubeletResources | None
) -> PodLevelNumbers | None:
    """Without an annotation: a container whose CPU request (from its shares) is above its
    pod's can only have been given its pod's pod-level CPU limit by kubelet (a pod's request
    is never below one of its containers' otherwise), so its pod has pod-level resources: no
    exclusive CPUs, and it counts for at most the pod's request. None when that cannot be
    told (a pod-level budget with requests equal to limits looks like a one-container pod)."""
    if pod is None or pod.cpu_shares <= MIN_SHARES:
        return None
    pod_request = estimate_from_cri(pod)["cpu_request_milli"]
    if numbers["cpu_request_milli"] <= pod_request:
        return None
    return PodLevelNumbers(dict(numbers), pod_request, "Burstable")


def _qos_from_numbers(numbers: Mapping[str, int]) -> QoSClass:
    # Only used when the cgroup parent is not kubelet's; judges this container alone.
    cpu_r, cpu_l = numbers["cpu_request_milli"], numbers["cpu_limit_milli"]
    mem_r, mem_l = numbers["memory_request"], numbers["memory_limit"]
    if not any((cpu_r, cpu_l, mem_r, mem_l)):
        return "BestEffort"
    if cpu_l and mem_l and cpu_r == cpu_l and mem_r == mem_l:
        return "Guaranteed"
    return "Burstable"


def _resources_entry(
    annotations: Mapping[str, str], container: str, warn: Callable[[str], None], pod: str
) -> tuple[str, dict[str, int], PodLevelNumbers | None] | None:
    for key in RESOURCES_KEYS:
        if key not in annotations:
            continue
        try:
            parsed = ResourcesAnnotation.parse(annotations[key], key=key)
        except ResourcesAnnotationError as exc:
            warn(f"pod {pod}: ignoring {exc}")
            return None
        entry = parsed.get(container)
        if entry is None:
            warn(f'pod {pod}: annotation "{key}" has no entry for container {container}')
            return None
        try:
            by_pod = pod_level_numbers_for(parsed, container)
            if by_pod is not None:
                return key, dict(by_pod.numbers), by_pod
            numbers = _from_annotation({"requests": entry.requests, "limits": entry.limits})
            return key, numbers, None
        except (ValueError, ArithmeticError) as exc:
            warn(f'pod {pod}: annotation "{key}" container {container}: bad quantity: {exc}')
            return None
    return None


def decode_container(
    create: ContainerCreate,
    *,
    classes: ClassSettings | None = None,
    machine: Machine | None = None,
    warn: Callable[[str], None] = lambda _msg: None,
) -> ContainerRequest:
    """The ContainerRequest of a creation; DecodeError when it must be refused.

    `machine`: what the node has; without it kubelet's cpusets are only parsed, and the
    annotation's requests are not held against the node's capacity."""
    classes = classes or ClassSettings()
    name = create.container
    if not name:
        raise DecodeError(Reason.BAD_REQUEST, "the container's name is empty")
    pod = f"{create.namespace}/{create.pod_name}"
    annotations = create.annotations
    res = create.resources

    try:
        validate_class_annotations(annotations)
        validate_balloon_annotations(annotations)
        validate_cpu_class_annotations(annotations)
        validate_task_class_annotations(annotations)
        validate_preference_annotations(annotations)
    except (ClassRequestError, PreferenceError) as exc:
        raise DecodeError(Reason.BAD_REQUEST, f"pod {pod}: {exc}") from None
    try:
        check_preference_access(annotations, create.namespace, classes.preferences)
    except PreferenceForbidden as exc:
        raise DecodeError(Reason.FORBIDDEN, f"pod {pod}: {exc}") from None
    where = f"pod {pod} container {name}: the CRI request's"
    kubelet_cpus = _kubelet_cpuset(
        res.cpuset_cpus, "cpuset_cpus", machine.cpus if machine else None, "CPU", where
    )
    kubelet_mems = _kubelet_cpuset(
        res.cpuset_mems, "cpuset_mems", machine.mems if machine else None, "memory node", where
    )

    parent_qos = qos_from_cgroup_parent(create.cgroup_parent)
    found = _resources_entry(annotations, name, warn, pod)
    source = "cri"
    by_pod: PodLevelNumbers | None = None
    if found is not None:
        key, numbers, by_pod = found
        # In a pod with pod-level resources a container is held against the node for its part
        # of the pod's request (kubelet gives one without a request the pod's CPU limit).
        held = numbers if by_pod is None else {**numbers, "cpu_request_milli": by_pod.share_milli}
        beyond = _beyond_capacity(held, machine)
        contradiction = None if beyond else _contradiction(numbers, res)
        if beyond:
            warn(
                f'pod {pod} container {name}: annotation "{key}" asks for more than the node '
                f"has: {beyond}; using the CRI values"
            )
        elif contradiction:
            warn(
                f'pod {pod} container {name}: annotation "{key}" contradicts the CRI request: '
                f"{contradiction}; using the CRI values"
            )
        else:
            source = key
    qos: QoSClass
    if source == "cri":
        numbers = estimate_from_cri(res)
        by_pod = _borrowed_budget(numbers, create.pod_resources)
    qos = parent_qos or (by_pod.qos if by_pod else _qos_from_numbers(numbers))

    def _class(kind: ClassKind, configured: Collection[str] | None) -> ClassRequest | None:
        try:
            return resolve_class(
                annotations,
                kind,
                name,
                qos=qos,
                namespace=create.namespace,
                configured=configured,
                access=classes.access,
            )
        except ClassRequestError as exc:
            reason = Reason.FORBIDDEN if exc.permission_denied else Reason.BAD_REQUEST
            raise DecodeError(reason, f"pod {pod}: {exc}") from None

    try:
        balloon = resolve_balloon(
            annotations,
            name,
            namespace=create.namespace,
            types=classes.balloon_types,
            access=classes.balloon_access,
        )
    except ClassRequestError as exc:
        reason = Reason.FORBIDDEN if exc.permission_denied else Reason.BAD_REQUEST
        raise DecodeError(reason, f"pod {pod}: {exc}") from None
    try:
        cpu_class = resolve_cpu_class(
            annotations,
            name,
            namespace=create.namespace,
            classes=classes.cpu_classes,
            access=classes.cpu_class_access,
        )
        sched, memory = classes.tasks.resolve(annotations, name, create.namespace)
    except ClassRequestError as exc:
        reason = Reason.FORBIDDEN if exc.permission_denied else Reason.BAD_REQUEST
        raise DecodeError(reason, f"pod {pod}: {exc}") from None
    try:
        affinity = resolve_affinity(annotations, name)
    except AffinityError as exc:
        raise DecodeError(Reason.BAD_REQUEST, f"pod {pod}: {exc}") from None
    rdt = _class("rdt", classes.rdt)
    blockio = _class("blockio", classes.blockio)
    prefs = Preferences(
        isolated=resolve_preference(annotations, "prefer-isolated-cpus", name),
        shared=resolve_preference(annotations, "prefer-shared-cpus", name),
        reserved=resolve_preference(annotations, "prefer-reserved-cpus", name),
        preserve=resolve_preference(annotations, "cpu.preserve", name),
    )
    return ContainerRequest(
        pod_uid=create.pod_uid,
        pod_name=create.pod_name,
        namespace=create.namespace,
        container=name,
        qos=qos,
        attempt=create.attempt,
        source=source,
        preferences=prefs,
        rdt_class=rdt.name if rdt else None,
        blockio_class=blockio.name if blockio else None,
        rdt_explicit=bool(rdt and rdt.explicit),
        blockio_explicit=bool(blockio and blockio.explicit),
        kubelet_cpus=kubelet_cpus,
        kubelet_mems=kubelet_mems,
        balloon=balloon.name if balloon else None,
        cpu_class=cpu_class.name if cpu_class else None,
        affinity=affinity,
        labels=tuple(sorted(create.labels.items())) if affinity or create.labels else (),
        pod_level=by_pod is not None,
        pod_share_milli=by_pod.share_milli if by_pod else 0,
        scheduling_class=sched,
        memory_class=memory,
        devices=(),  # read from kubelet by the shell (enforcer.podresources), not decoded
        device_nodes=(),
        **numbers,
    )
