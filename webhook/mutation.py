"""Pod -> `resource-enforcer.dev/resources` annotation -> JSON Patch. Pure: no I/O, no clock.

The pod arrives as the plain dict of the AdmissionReview, already checked for shape by
`webhook.admission`. The annotation depends only on a small, hashable part of the pod
(`PodInput`: container names and resources, the class and preference annotations, the
namespace), so `Mutator` memoizes it: the replicas of one Deployment cost one computation.
Everything is deterministic, so a second pass over the pod it produced yields the same
annotation (required by `reinvocationPolicy: IfNeeded`).
"""

from __future__ import annotations

import base64
import functools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from enforcer.annotations import (
    CLASS_KINDS,
    RESOURCES_KEY,
    ClassAccess,
    ClassKind,
    ClassRequestError,
    ContainerResources,
    PreferenceError,
    ResourcesAnnotation,
    resolve_class,
    validate_class_annotations,
    validate_preference_annotations,
)
from enforcer.config import Config
from enforcer.qos import parse_quantity, qos_class

Pairs = tuple[tuple[str, Any], ...]


@dataclass(frozen=True)
class Policy:
    """What the webhook checks class requests against; built once, at start-up."""

    # None: no --config, so any well-formed class name goes and there is no QoS default.
    configured: Mapping[ClassKind, frozenset[str]] | None = None
    access: ClassAccess | None = None

    @classmethod
    def from_config(cls, config: Config | None) -> Policy:
        if config is None:
            return cls()
        return cls(
            configured={k: frozenset(config.configured_classes(k)) for k in CLASS_KINDS},
            access=config.class_access(),
        )


class Denial(Exception):
    """The pod must be refused; `code` and `message` go into the AdmissionReview's status."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason  # for metrics: malformed, unknown, forbidden, preference, quantity
        self.message = message


class ContainerInput(NamedTuple):
    name: str
    requests: Pairs
    limits: Pairs


class PodInput(NamedTuple):
    """Everything the annotation depends on; hashable, so results can be memoized.
    (Tuples rather than frozen dataclasses: built for every admission, they are cheaper.)"""

    namespace: str
    containers: tuple[ContainerInput, ...]
    init_containers: tuple[ContainerInput, ...]
    annotations: Pairs  # only the class and preference annotations (see `is_request_key`)


def is_request_key(key: str) -> bool:
    """A cheap superset test of the class and preference annotation keys, in every dialect.

    Every class key holds `rdt` or `blockio` (rdtclass.*, rdt.resources.beta..., blockioclass.*,
    blockio.resources.beta...), every preference key `prefer-` or `cpu.preserve`; the shared
    validators look only at such keys, so handing them this subset changes nothing, and a pod
    with twenty unrelated annotations costs no more than one without.
    """
    return "rdt" in key or "blockio" in key or "prefer-" in key or "cpu.preserve" in key


def _container_inputs(containers: Any) -> tuple[ContainerInput, ...]:
    out = []
    for c in containers or ():
        resources = c.get("resources")
        if resources:
            requests, limits = resources.get("requests"), resources.get("limits")
            out.append(
                ContainerInput(
                    c["name"],
                    tuple(requests.items()) if requests else (),
                    tuple(limits.items()) if limits else (),
                )
            )
        else:
            out.append(ContainerInput(c["name"], (), ()))
    return tuple(out)


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
    )


def quantity_text(value: str | int | float) -> str:
    """A quantity as the spec wrote it; a JSON number becomes its decimal text."""
    if isinstance(value, str):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return str(int(value)) if abs(value) < 1e15 else repr(value)
    return repr(value)


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
                        parse_quantity(value)
                    except (ValueError, ArithmeticError, TypeError):
                        raise Denial(
                            400,
                            "quantity",
                            f'{field} "{c.name}": resources.{part}.{name}: '
                            f'"{quantity_text(value)}" is not a valid quantity',
                        ) from None


def _spec(pod: PodInput) -> dict[str, Any]:
    def containers(cs: tuple[ContainerInput, ...]) -> list[dict[str, Any]]:
        return [
            {"name": c.name, "resources": {"requests": dict(c.requests), "limits": dict(c.limits)}}
            for c in cs
        ]

    return {
        "containers": containers(pod.containers),
        "initContainers": containers(pod.init_containers),
    }


def _classes(
    annotations: Mapping[str, str], container: str, *, qos: str, namespace: str, policy: Policy
) -> dict[str, str] | None:
    if not annotations and policy.configured is None:
        return None  # nothing asked, and no QoS-named default without a configuration
    found: dict[str, str] = {}
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


def compute_annotation(pod: PodInput, policy: Policy) -> str:
    """The annotation's value; raises Denial for a request that must be refused."""
    annotations = dict(pod.annotations)
    try:
        validate_preference_annotations(annotations)
    except PreferenceError as exc:
        raise Denial(400, "preference", str(exc)) from None
    try:
        # Refuses a malformed name even for a container the pod does not have (a mistyped
        # container name would otherwise hide it).
        validate_class_annotations(annotations)
    except ClassRequestError as exc:
        raise Denial(400, exc.reason, str(exc)) from None
    _check_quantities(pod)
    qos = qos_class(_spec(pod))

    def entries(containers: tuple[ContainerInput, ...]) -> dict[str, ContainerResources]:
        return {
            c.name: ContainerResources(
                requests={k: quantity_text(v) for k, v in c.requests},
                limits={k: quantity_text(v) for k, v in c.limits},
                classes=_classes(
                    annotations, c.name, qos=qos, namespace=pod.namespace, policy=policy
                ),
            )
            for c in containers
        }

    return ResourcesAnnotation(
        containers=entries(pod.containers), initContainers=entries(pod.init_containers)
    ).to_json()


def build_annotation(pod: Mapping[str, Any], *, namespace: str, policy: Policy) -> str:
    """The annotation's value for a pod given as a plain dict (uncached)."""
    return compute_annotation(pod_input(pod, namespace), policy)


def escape_pointer_token(key: str) -> str:
    """RFC 6901: `~` -> `~0` first, then `/` -> `~1`."""
    return key.replace("~", "~0").replace("/", "~1")


ANNOTATION_PATH = "/metadata/annotations/" + escape_pointer_token(RESOURCES_KEY)

# Where the annotation goes, by what the pod has: a metadata map with annotations, one
# without, or no metadata at all.
SET, NO_ANNOTATIONS, NO_METADATA = "set", "no-annotations", "no-metadata"


def patch_for(shape: str, value: str) -> list[dict[str, Any]]:
    """The JSON Patch that sets the annotation, creating the maps on the way when absent."""
    if shape == NO_METADATA:
        return [
            {"op": "add", "path": "/metadata", "value": {"annotations": {RESOURCES_KEY: value}}}
        ]
    if shape == NO_ANNOTATIONS:
        # One op for the whole map: an `add` to a key needs its parent map to exist.
        return [{"op": "add", "path": "/metadata/annotations", "value": {RESOURCES_KEY: value}}]
    # `add` on an existing member replaces it: whatever the author wrote is overwritten.
    return [{"op": "add", "path": ANNOTATION_PATH, "value": value}]


def patch_shape(pod: Mapping[str, Any]) -> str:
    metadata = pod.get("metadata")
    if metadata is None:
        return NO_METADATA
    return NO_ANNOTATIONS if metadata.get("annotations") is None else SET


def annotation_patch(pod: Mapping[str, Any], value: str) -> list[dict[str, Any]]:
    return patch_for(patch_shape(pod), value)


def patch_json(patch: list[dict[str, Any]]) -> str:
    return json.dumps(patch, separators=(",", ":"))


class Mutation(NamedTuple):
    annotation: str  # the annotation's value, compact JSON
    patch: list[dict[str, Any]]  # empty when the pod already carries exactly this value
    patch_b64: str | None  # the patch as the AdmissionReview carries it
    replaced: str | None  # a different value the pod's author had written, now overwritten


class Mutator:
    """`mutate` with memoized annotations and encoded patches, for one Policy."""

    def __init__(self, policy: Policy | None = None, *, cache_size: int = 1024) -> None:
        self.policy = policy or Policy()
        self._annotation = functools.lru_cache(maxsize=cache_size)(self._compute)
        self._encoded = functools.lru_cache(maxsize=cache_size)(self._encode)

    def _compute(self, pod: PodInput) -> str:
        return compute_annotation(pod, self.policy)

    @staticmethod
    def _encode(shape: str, value: str) -> str:
        return base64.b64encode(patch_json(patch_for(shape, value)).encode()).decode()

    def annotation(self, pod: Mapping[str, Any], namespace: str) -> str:
        return self._annotation(pod_input(pod, namespace))

    def mutate(self, pod: Mapping[str, Any], namespace: str) -> Mutation:
        value = self.annotation(pod, namespace)
        existing = ((pod.get("metadata") or {}).get("annotations") or {}).get(RESOURCES_KEY)
        if existing == value:
            return Mutation(value, [], None, None)
        shape = patch_shape(pod)
        return Mutation(value, patch_for(shape, value), self._encoded(shape, value), existing)


def mutate_pod(pod: Mapping[str, Any], *, namespace: str, policy: Policy) -> Mutation:
    """One pod, uncached (tests and tools)."""
    return Mutator(policy, cache_size=0).mutate(pod, namespace)
