"""Pod -> `resource-enforcer.dev/resources` annotation -> JSON Patch. Pure: no I/O, no clock.

The pod arrives as the plain dict of the AdmissionReview, already checked for shape by
`webhook.admission`. The annotation itself is the contract's (`resource_contract.pod_annotation`);
it depends only on a small, hashable part of the pod, so `Mutator` memoizes it, in a cache
bounded in bytes (`webhook.cache`): the replicas of one Deployment cost one computation. A
second pass over the pod it produced yields the same annotation (required by
`reinvocationPolicy: IfNeeded`).
"""

from __future__ import annotations

import base64
import sys
from collections.abc import Mapping
from itertools import chain
from typing import Any, NamedTuple

import msgspec

from resource_contract.keys import RESOURCES_KEY
from resource_contract.pod_annotation import (
    PodInput,
    Policy,
    compact_json,
    compute_annotation,
    pod_input,
)
from webhook.cache import DEFAULT_CACHE_BYTES, ByteLRU

__all__ = ["Mutation", "Mutator", "Policy", "annotation_patch", "mutate_pod", "patch_json"]


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


def annotation_json(value: dict[str, Any]) -> str:
    """`resource_contract.pod_annotation.compact_json`, written by msgspec: the same text
    whenever msgspec's is ASCII without DEL (json.dumps escapes those; msgspec writes UTF-8
    and DEL as they are), else json.dumps's."""
    raw = msgspec.json.encode(value)
    if raw.isascii() and b"\x7f" not in raw:
        return raw.decode("ascii")
    return compact_json(value)


def patch_json(patch: list[dict[str, Any]]) -> str:
    """Compact JSON; the annotation's value is ASCII (`json.dumps` escapes the rest), so
    msgspec writes the bytes `json.dumps(patch, separators=(",", ":"))` would."""
    return msgspec.json.encode(patch).decode()


def pod_input_size(key: PodInput) -> int:
    """`deep_size(key)` for a PodInput, object by object as deep_size counts them, the loops
    run in C: on a review of a new pod, sizing its key by the generic walk cost as much as
    reading the review."""
    size = sys.getsizeof
    total = size(key) + size(key.namespace) + size(key.containers) + size(key.init_containers)
    pairs: list[tuple[str, Any]] = list(key.annotations)
    total += size(key.annotations)
    for group in (key.containers, key.init_containers):
        total += sum(map(size, group))
        for c in group:
            total += size(c.name) + size(c.requests) + size(c.limits)
            pairs += c.requests
            pairs += c.limits
    return total + sum(map(size, pairs)) + sum(map(size, chain.from_iterable(pairs)))


class Mutation(NamedTuple):
    annotation: str  # the annotation's value, compact JSON
    patch: list[dict[str, Any]]  # empty when the pod already carries exactly this value
    patch_b64: str | None  # the patch as the AdmissionReview carries it
    replaced: str | None  # a different value the pod's author had written, now overwritten


class Mutator:
    """`mutate` with memoized annotations and encoded patches, for one Policy, and the parts of
    annotations that pods share; all within `cache_bytes` (0: nothing memoized)."""

    def __init__(
        self, policy: Policy | None = None, *, cache_bytes: int = DEFAULT_CACHE_BYTES
    ) -> None:
        self.policy = policy or Policy()
        # A sixteenth of the budget (at most 1 MiB) for the parts the replicas of a Deployment
        # share (checked annotations, each container's classes); the rest for the annotations
        # and patches. Together they stay within `cache_bytes`.
        parts = min(cache_bytes // 16, 1024 * 1024)
        self.parts = ByteLRU(parts)
        self.cache = ByteLRU(cache_bytes - parts)

    def _compute(self, pod: PodInput) -> str:
        # The parts shared by the replicas of a Deployment are kept in the same cache.
        return compute_annotation(pod, self.policy, self.parts.get_or_compute, annotation_json)

    @staticmethod
    def _encode(shape: str, value: str) -> str:
        return base64.b64encode(patch_json(patch_for(shape, value)).encode()).decode()

    def annotation(self, pod: Mapping[str, Any], namespace: str) -> str:
        key = pod_input(pod, namespace)
        # A Denial raised by the computation propagates and is not kept.
        value: str = self.cache.get_or_compute(key, lambda: self._compute(key), pod_input_size)
        return value

    def mutate(self, pod: Mapping[str, Any], namespace: str) -> Mutation:
        value = self.annotation(pod, namespace)
        existing = ((pod.get("metadata") or {}).get("annotations") or {}).get(RESOURCES_KEY)
        if existing == value:
            return Mutation(value, [], None, None)
        shape = patch_shape(pod)
        encoded: str = self.cache.get_or_compute(
            ("patch", shape, value), lambda: self._encode(shape, value)
        )
        return Mutation(value, patch_for(shape, value), encoded, existing)


def mutate_pod(pod: Mapping[str, Any], *, namespace: str, policy: Policy) -> Mutation:
    """One pod, uncached (tests and tools)."""
    return Mutator(policy, cache_bytes=0).mutate(pod, namespace)
