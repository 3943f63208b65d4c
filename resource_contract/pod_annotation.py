"""A pod's `resource-enforcer.dev/resources` annotation: what the webhook writes, plan computes.

Pure: the pod is a plain dict (as the AdmissionReview carries it). The annotation depends only
on a small, hashable part of the pod (`PodInput`: container names and resources, the class and
preference annotations, the namespace), so a caller can memoize it. Everything is
deterministic, so a second pass over the pod it produced yields the same annotation.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from functools import partial
from typing import Any, NamedTuple

from resource_contract.affinity import AffinityError, validate_affinity_annotations
from resource_contract.balloons import (
    BalloonAccess,
    resolve_balloon,
    validate_balloon_annotations,
)
from resource_contract.classes import (
    CLASS_KINDS,
    ClassAccess,
    ClassKind,
    ClassRequestError,
    resolve_class,
    validate_class_annotations,
)
from resource_contract.config import Config
from resource_contract.cpu_classes import (
    CpuClassAccess,
    resolve_cpu_class,
    validate_cpu_class_annotations,
)
from resource_contract.pod_resources import PodContainer, QoSClass, pod_level_qos
from resource_contract.preferences import (
    PreferenceAccess,
    PreferenceError,
    PreferenceForbidden,
    check_preference_access,
    validate_preference_annotations,
)
from resource_contract.qos import qos_of_containers
from resource_contract.quantities import parse_quantity
from resource_contract.task_classes import TaskClassSettings, validate_task_class_annotations

Pairs = tuple[tuple[str, Any], ...]


@dataclass(frozen=True)
class Policy:
    """What the webhook checks class and preference requests against; built once, at start-up."""

    # None: no --config, so any well-formed class name goes and there is no QoS default.
    configured: Mapping[ClassKind, frozenset[str]] | None = None
    access: ClassAccess | None = None
    # None: no --config, so every preference goes here (the enforcer checks it on the node).
    preferences: PreferenceAccess | None = None
    # None: no --config, or a policy other than balloons: any well-formed type name goes.
    balloon_types: tuple[str, ...] | None = None
    balloon_access: BalloonAccess | None = None
    # None: no --config: any well-formed CPU class name goes.
    cpu_classes: frozenset[str] | None = None
    cpu_class_access: CpuClassAccess | None = None
    # Scheduling and memory classes; no --config: any well-formed name goes.
    tasks: TaskClassSettings = dataclass_field(default_factory=TaskClassSettings)

    @classmethod
    def from_config(cls, config: Config | None) -> Policy:
        if config is None:
            return cls()
        balloons = config.policy.name == "balloons"
        return cls(
            configured={k: frozenset(config.configured_classes(k)) for k in CLASS_KINDS},
            access=config.class_access(),
            preferences=config.preference_access(),
            balloon_types=tuple(config.policy.balloon_type_names()) if balloons else None,
            balloon_access=config.balloon_access() if balloons else None,
            cpu_classes=frozenset(config.cpuClasses),
            cpu_class_access=config.cpu_class_access(),
            tasks=config.task_classes(),
        )


class Denial(Exception):
    """The pod must be refused; `code` and `message` go into the AdmissionReview's status."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        # For metrics: malformed, unknown, forbidden, preference, preference-forbidden, quantity,
        # affinity.
        self.reason = reason
        self.message = message


class ContainerInput(NamedTuple):
    name: str
    requests: Pairs
    limits: Pairs
    restartable: bool = False  # an init container with restartPolicy Always (a sidecar)


class PodResourcesInput(NamedTuple):
    """The pod's `spec.resources` (pod-level resources) as written."""

    requests: Pairs
    limits: Pairs


class PodInput(NamedTuple):
    """Everything the annotation depends on; hashable, so results can be memoized.
    (Tuples rather than frozen dataclasses: built for every admission, they are cheaper.)"""

    namespace: str
    containers: tuple[ContainerInput, ...]
    init_containers: tuple[ContainerInput, ...]
    annotations: Pairs  # only the class and preference annotations (see `is_request_key`)
    # `spec.resources`, when it has requests or limits; None: no pod-level resources.
    pod_resources: PodResourcesInput | None = None


def is_request_key(key: str) -> bool:
    """A cheap superset test of the class and preference annotation keys, in every dialect.

    Every class key holds `rdt` or `blockio` (rdtclass.*, rdt.resources.beta..., blockioclass.*,
    blockio.resources.beta...), every preference key `prefer-` or `cpu.preserve`, every
    balloon key `balloon`, every CPU-class key `cpuclass`, every affinity key `affinity` and every
    scheduling- and memory-class key `class.`;
    the shared validators look only at such keys, so handing them this subset changes nothing,
    and a pod with twenty unrelated annotations costs no more than one without.
    """
    return (
        "rdt" in key
        or "blockio" in key
        or "prefer-" in key
        or "cpu.preserve" in key
        or "balloon" in key
        or "cpuclass" in key
        or "affinity" in key
        or "class." in key  # schedulingclass. and memoryclass.
    )


def _container_inputs(containers: Any) -> tuple[ContainerInput, ...]:
    out = []
    for c in containers or ():
        resources = c.get("resources")
        restartable = c.get("restartPolicy") == "Always"
        if resources:
            requests, limits = resources.get("requests"), resources.get("limits")
            out.append(
                ContainerInput(
                    c["name"],
                    tuple(requests.items()) if requests else (),
                    tuple(limits.items()) if limits else (),
                    restartable,
                )
            )
        else:
            out.append(ContainerInput(c["name"], (), (), restartable))
    return tuple(out)


def pod_resources_input(resources: Any) -> PodResourcesInput | None:
    """`spec.resources` as the annotation records it; None when it has neither requests nor
    limits (the key `pod` is then left out)."""
    if not resources:
        return None
    requests, limits = resources.get("requests"), resources.get("limits")
    if not requests and not limits:
        return None
    return PodResourcesInput(
        tuple(requests.items()) if requests else (), tuple(limits.items()) if limits else ()
    )


def pod_input(pod: Mapping[str, Any], namespace: str) -> PodInput:
    metadata = pod.get("metadata") or {}
    annotations = metadata.get("annotations")
    spec = pod.get("spec") or {}
    return PodInput(
        namespace,
        # Ephemeral containers are left out: they come through a subresource, have no
        # resources, and the enforcer leaves them alone.
        _container_inputs(spec.get("containers")),
        _container_inputs(spec.get("initContainers")),
        tuple([(k, v) for k, v in annotations.items() if is_request_key(k)]) if annotations else (),
        pod_resources_input(spec.get("resources")),
    )


def quantity_text(value: str | int | float) -> str:
    """A quantity as the spec wrote it; a JSON number becomes its decimal text."""
    if isinstance(value, str):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return str(int(value)) if abs(value) < 1e15 else repr(value)
    return repr(value)


def quantity_denial(field: str, container: str, part: str, name: str, value: Any) -> Denial:
    """The refusal of a quantity that does not parse or is negative (the API server refuses
    both), `field` being containers or initContainers and `part` requests or limits."""
    try:
        negative = parse_quantity(value) < 0
    except (ValueError, ArithmeticError, TypeError):
        negative = False
    why = "is negative (must be 0 or more)" if negative else "is not a valid quantity"
    return Denial(
        400,
        "quantity",
        f'{field} "{container}": resources.{part}.{name}: "{quantity_text(value)}" {why}',
    )


def pod_quantity_denial(
    part: str, name: str, value: Any, why: str = "is not a valid quantity"
) -> Denial:
    """The refusal of a pod-level quantity, `part` being requests or limits."""
    return Denial(400, "quantity", f'spec.resources.{part}.{name}: "{quantity_text(value)}" {why}')


def check_pod_quantities(resources: PodResourcesInput) -> None:
    """Every pod-level quantity must parse, and none may be negative (the API server refuses
    both)."""
    for part, pairs in (("requests", resources.requests), ("limits", resources.limits)):
        for name, value in pairs:
            try:
                parsed = parse_quantity(value)
            except (ValueError, ArithmeticError, TypeError):
                raise pod_quantity_denial(part, name, value) from None
            if parsed < 0:
                raise pod_quantity_denial(part, name, value, "must not be negative")


def pod_level_class(pod: PodInput) -> QoSClass | None:
    """The QoS class the pod's pod-level resources give it (its quantities checked already),
    or None when it has none."""
    resources = pod.pod_resources
    if resources is None:
        return None
    members = [
        PodContainer(dict(c.requests), dict(c.limits), init=True, restartable=c.restartable)
        for c in pod.init_containers
    ] + [PodContainer(dict(c.requests), dict(c.limits)) for c in pod.containers]
    return pod_level_qos(dict(resources.requests), dict(resources.limits), members)


def pod_resources_entry(resources: PodResourcesInput) -> dict[str, dict[str, str]]:
    """The annotation's `pod` entry: the quantities as the spec wrote them."""
    return {
        "requests": {k: quantity_text(v) for k, v in resources.requests},
        "limits": {k: quantity_text(v) for k, v in resources.limits},
    }


def _check_quantities(pod: PodInput) -> None:
    """Every quantity, not only the cpu and memory that the QoS class reads, must parse the
    way the enforcer will parse it."""
    for field, containers in (
        ("initContainers", pod.init_containers),
        ("containers", pod.containers),
    ):
        for c in containers:
            for part, pairs in (("requests", c.requests), ("limits", c.limits)):
                for name, value in pairs:
                    try:
                        negative = parse_quantity(value) < 0
                    except (ValueError, ArithmeticError, TypeError):
                        negative = True
                    if negative:
                        raise quantity_denial(field, c.name, part, name, value) from None


def container_classes(
    annotations: Mapping[str, str], container: str, *, qos: str, namespace: str, policy: Policy
) -> dict[ClassKind, str] | None:
    """The classes a container asked for (or its QoS class's defaults), or None; raises
    Denial for a request that must be refused."""
    if not annotations and policy.configured is None:
        return None  # nothing asked, and no QoS-named default without a configuration
    found: dict[ClassKind, str] = {}
    for kind in CLASS_KINDS:
        try:
            request = resolve_class(
                annotations,
                kind,
                container,
                qos=qos,
                namespace=namespace,
                configured=None if policy.configured is None else policy.configured[kind],
                access=policy.access,
            )
        except ClassRequestError as exc:
            raise Denial(403 if exc.permission_denied else 400, exc.reason, str(exc)) from None
        if request is not None:
            found[kind] = request.name
    return found or None


# `memo(key, compute)`: compute()'s value, or the one kept for an equal key; an exception from
# compute propagates and nothing is kept (webhook.cache.ByteLRU.get_or_compute).
Memo = Callable[[Hashable, Callable[[], Any]], Any]


def _no_memo(key: Hashable, compute: Callable[[], Any]) -> Any:
    return compute()


def check_annotations(
    annotations: dict[str, str], namespace: str, names: list[str], policy: Policy
) -> bool:
    """Raises Denial for a class, preference, balloon, CPU class or affinity request that
    must be refused; `names` are the pod's containers, init containers first."""
    try:
        validate_preference_annotations(annotations)
    except PreferenceError as exc:
        raise Denial(400, "preference", str(exc)) from None
    if policy.preferences is not None:
        try:
            check_preference_access(annotations, namespace, policy.preferences)
        except PreferenceForbidden as exc:
            raise Denial(403, "preference-forbidden", str(exc)) from None
    try:
        # Refuses a malformed name even for a container the pod does not have (a mistyped
        # container name would otherwise hide it).
        validate_class_annotations(annotations)
    except ClassRequestError as exc:
        raise Denial(400, exc.reason, str(exc)) from None
    try:
        validate_balloon_annotations(annotations)
        for name in names:
            resolve_balloon(
                annotations,
                name,
                namespace=namespace,
                types=policy.balloon_types,
                access=policy.balloon_access,
            )
    except ClassRequestError as exc:
        raise Denial(403 if exc.permission_denied else 400, exc.reason, str(exc)) from None
    try:
        validate_cpu_class_annotations(annotations)
        for name in names:
            resolve_cpu_class(
                annotations,
                name,
                namespace=namespace,
                classes=policy.cpu_classes,
                access=policy.cpu_class_access,
            )
    except ClassRequestError as exc:
        raise Denial(403 if exc.permission_denied else 400, exc.reason, str(exc)) from None
    try:
        validate_task_class_annotations(annotations)
        for name in names:
            policy.tasks.resolve(annotations, name, namespace)
    except ClassRequestError as exc:
        raise Denial(403 if exc.permission_denied else 400, exc.reason, str(exc)) from None
    try:
        validate_affinity_annotations(annotations, names)
    except AffinityError as exc:
        raise Denial(400, "affinity", str(exc)) from None
    return True


def compact_json(value: dict[str, Any]) -> str:
    """The annotation's text: compact JSON, non-ASCII escaped (what the enforcer reads)."""
    return json.dumps(value, separators=(",", ":"))


def compute_annotation(
    pod: PodInput,
    policy: Policy,
    memo: Memo = _no_memo,
    encode: Callable[[dict[str, Any]], str] = compact_json,
) -> str:
    """The annotation's value; raises Denial for a request that must be refused.

    `memo` may keep the parts that depend on the annotations, namespace and container names
    only (for one `policy`): the replicas of a Deployment share them. The checks run in the
    same order either way, so the same Denial comes first. `encode` must write what
    `compact_json` writes (a faster encoder may stand in for it)."""
    annotations = dict(pod.annotations)
    containers = pod.init_containers + pod.containers
    memo(
        ("checked", pod.annotations, pod.namespace, tuple(c.name for c in containers)),
        lambda: check_annotations(annotations, pod.namespace, [c.name for c in containers], policy),
    )
    _check_quantities(pod)
    if pod.pod_resources is not None:
        check_pod_quantities(pod.pod_resources)
    qos = pod_level_class(pod) or qos_of_containers(
        [(c.requests, c.limits) for c in (*pod.init_containers, *pod.containers)]
    )

    def entries(containers: tuple[ContainerInput, ...]) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for c in containers:
            entry: dict[str, Any] = {
                "requests": {k: quantity_text(v) for k, v in c.requests},
                "limits": {k: quantity_text(v) for k, v in c.limits},
            }
            classes = memo(
                ("classes", pod.annotations, c.name, qos, pod.namespace),
                partial(
                    container_classes,
                    annotations,
                    c.name,
                    qos=qos,
                    namespace=pod.namespace,
                    policy=policy,
                ),
            )
            if classes is not None:
                entry["classes"] = classes
            out[c.name] = entry
        return out

    # What ResourcesAnnotation(...).to_json() writes, made straight from the plain values (the
    # model's validation has nothing to find in them): the same bytes, a fifth of the time.
    value: dict[str, Any] = {
        "containers": entries(pod.containers),
        "initContainers": entries(pod.init_containers),
    }
    if pod.pod_resources is not None:
        value["pod"] = pod_resources_entry(pod.pod_resources)
    return encode(value)


def build_annotation(pod: Mapping[str, Any], *, namespace: str, policy: Policy) -> str:
    """The annotation's value for a pod given as a plain dict (uncached)."""
    return compute_annotation(pod_input(pod, namespace), policy)
