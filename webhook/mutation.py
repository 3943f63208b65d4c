"""Pod -> `resource-enforcer.dev/resources` annotation -> JSON Patch. Pure: no I/O, no clock.

The pod arrives as decoded by `webhook.admission` (`webhook.shapes.PodS`). The annotation is
the contract's (`resource_contract.pod_annotation`: what `compute_annotation` writes, the same
bytes), computed here in one pass over the containers: every quantity checked and the QoS
class found together, the class requests resolved once for all containers. It depends only on
a small part of the pod (the namespace, the class and preference annotations, the containers'
names, resources and restart policies, the pod-level resources), so `Mutator` memoizes it
with its encoded patch, keyed by that part's bytes, in a cache bounded in bytes
(`webhook.cache`), from the second pod with that part on:
the replicas of one Deployment cost two computations, a pod like no other costs no cache
entry. A second pass over the pod it produced yields the same annotation (required by
`reinvocationPolicy: IfNeeded`).
"""

from __future__ import annotations

import sys
from binascii import b2a_base64
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import msgspec

from resource_contract.classes import ClassKind
from resource_contract.keys import RESOURCES_KEY
from resource_contract.pod_annotation import (
    Denial,
    Pairs,
    PodResourcesInput,
    Policy,
    check_annotations,
    check_pod_quantities,
    compact_json,
    container_classes,
    is_request_key,
    pod_resources_entry,
    quantity_denial,
    quantity_text,
)
from resource_contract.pod_resources import PodContainer, QoSClass, pod_level_qos
from resource_contract.quantities import PARSED, parse_quantity
from webhook.cache import DEFAULT_CACHE_BYTES, ByteLRU, SeenBefore, deep_size
from webhook.shapes import PodS, PodSpecS

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
    if raw.isascii() and 127 not in raw:  # an int: memchr, a tenth of a one-byte bytes' search
        return raw.decode("ascii")
    return compact_json(value)


def patch_json(patch: list[dict[str, Any]]) -> str:
    """Compact JSON; the annotation's value is ASCII (`json.dumps` escapes the rest), so
    msgspec writes the bytes `json.dumps(patch, separators=(",", ":"))` would."""
    return msgspec.json.encode(patch).decode()


def _patch_frame(shape: str) -> tuple[bytes, bytes]:
    """The bytes of `patch_json(patch_for(shape, value))` before and after the value's JSON
    string (msgspec writes the same bytes for the same value wherever it stands)."""
    mark = "@@VALUE@@"
    raw = patch_json(patch_for(shape, mark)).encode()
    before, after = raw.split(msgspec.json.encode(mark))
    return before, after


_PATCH_FRAMES = {shape: _patch_frame(shape) for shape in (SET, NO_ANNOTATIONS, NO_METADATA)}


def encode_patch(shape: str, value: str) -> bytes:
    """The patch setting `value` for a pod of `shape`, as the AdmissionReview carries it
    (base64 of `patch_json(patch_for(shape, value))`, ASCII)."""
    before, after = _PATCH_FRAMES[shape]
    return b2a_base64(before + msgspec.json.encode(value) + after, newline=False)


_KEY = msgspec.json.Encoder()


class Mutation(msgspec.Struct, frozen=True, gc=False):
    """What `Mutator` answers for a pod (a Struct: made in C, a third of a NamedTuple's
    cost)."""

    annotation: str  # the annotation's value, compact JSON
    patch_b64: bytes | None  # the patch as the AdmissionReview carries it; None: no patch
    replaced: str | None  # a different value the pod's author had written, now overwritten
    shape: str  # where the annotation goes: SET, NO_ANNOTATIONS or NO_METADATA

    @property
    def patch(self) -> list[dict[str, Any]]:
        """The JSON Patch; empty when the pod already carries exactly this value."""
        return [] if self.patch_b64 is None else patch_for(self.shape, self.annotation)


class _RequestKeys(dict[str, bool]):
    """`is_request_key` for the annotation keys seen lately (pods repeat a few keys): at most
    4096 keys of at most 128 characters are kept (~1 MiB), and all are dropped when full."""

    def __missing__(self, key: str) -> bool:
        found = is_request_key(key)
        if len(key) <= 128:
            if len(self) >= 4096:
                self.clear()
            self[key] = found
        return found


_REQUEST_KEYS = _RequestKeys()
_ZERO = Decimal(0)
_Classes = tuple[dict[ClassKind, str] | None, ...]


class Mutator:
    """`mutate` with memoized annotations and encoded patches, for one Policy, and the parts of
    annotations that pods share; all within `cache_bytes` (0: nothing memoized)."""

    def __init__(
        self, policy: Policy | None = None, *, cache_bytes: int = DEFAULT_CACHE_BYTES
    ) -> None:
        self.policy = policy or Policy()
        # A sixteenth of the budget (at most 1 MiB) for the parts the replicas of a Deployment
        # share (checked annotations and each container's classes); the rest for the
        # annotations and patches. Together they stay within `cache_bytes`.
        parts = min(cache_bytes // 16, 1024 * 1024)
        self.parts = ByteLRU(parts)
        self.cache = ByteLRU(cache_bytes - parts)
        self.seen = SeenBefore()  # the keys of the pods computed lately (256 KiB)

    def mutate(self, pod: Mapping[str, Any], namespace: str) -> Mutation:
        """For a pod given as a plain dict (tests and tools)."""
        return self.mutate_decoded(msgspec.convert(pod, PodS, strict=True), namespace)

    def mutate_decoded(self, pod: PodS, namespace: str) -> Mutation:
        metadata = pod.metadata
        annotations = None if metadata is None else metadata.annotations
        if metadata is None:
            shape = NO_METADATA
        else:
            shape = SET if annotations is not None else NO_ANNOTATIONS
        pairs: Pairs = ()
        if annotations:
            keys = _REQUEST_KEYS
            picked = []  # a loop, not a comprehension: that is one more call on Python 3.11
            for item in annotations.items():
                if keys[item[0]]:
                    picked.append(item)
            pairs = tuple(picked)
        spec = pod.spec
        # What the annotation depends on (the namespace, the request annotations, the
        # containers' names and resources) and where it goes, as one JSON text: cheap to make,
        # hash and size, and equal for the replicas of a Deployment.
        key = _KEY.encode((namespace, shape, pairs, spec))
        # The cache is asked first, whatever the seen-before table says: an entry whose
        # sighting the table has lost (its slot taken by another key, or the table cleared)
        # is still answered from the cache until the cache drops it.
        found: tuple[str, bytes] | None = self.cache.get(key)
        if found is None:
            # A Denial raised by the computation propagates and nothing is kept or marked.
            value = self.annotation(spec, pairs, namespace)
            found = (value, encode_patch(shape, value))
            # Kept from the second time on: a pod seen once (most are, in a cluster without
            # replicas) would only push out the Deployments' pods.
            if self.seen.check_and_mark(hash(key)):
                size = sys.getsizeof
                self.cache.put(key, found, size(key) + size(found) + size(value) + size(found[1]))
        value, encoded = found
        existing = annotations.get(RESOURCES_KEY) if annotations else None
        if existing == value:
            return Mutation(value, None, None, shape)
        return Mutation(value, encoded, existing, shape)

    def annotation(self, spec: PodSpecS, pairs: Pairs, namespace: str) -> str:
        """`compute_annotation`'s value for the pod (the same text, the same Denial first)."""
        containers = spec.containers
        init = spec.initContainers or ()
        # Every quantity must parse as the enforcer will parse it, init containers first,
        # requests before limits; the QoS class (the API server's rules, as
        # resource_contract.qos: a missing request is its limit, each container classed by
        # its cpu and memory) is found in the same pass.
        seen_guaranteed = seen_best_effort = burstable = False
        numbers = False  # a quantity given as a JSON number: its text is written instead
        bad: Denial | None = None
        known = PARSED
        # Each container's entry, by name in its group's map (a later container of the same
        # name takes the earlier one's place, as a dict does): its requests and limits as the
        # pod gives them (the decoded maps), its classes once the QoS class is known.
        init_out: dict[str, dict[str, Any]] = {}
        containers_out: dict[str, dict[str, Any]] = {}
        init_entries: list[dict[str, Any]] = []
        entries: list[dict[str, Any]] = []
        names: list[str] = []
        entry: dict[str, Any]
        for field, group, out, listed in (
            ("initContainers", init, init_out, init_entries),
            ("containers", containers, containers_out, entries),
        ):
            for c in group:
                name = c.name
                names.append(name)
                resources = c.resources
                if resources is None:
                    seen_best_effort = True
                    out[name] = entry = {"requests": {}, "limits": {}}
                    listed.append(entry)
                    continue
                cpu = memory = None  # the requests; None: not given
                limit_cpu = limit_memory = _ZERO
                part = "requests"
                try:
                    requests = resources.requests
                    if requests:
                        for key, quantity in requests.items():
                            parsed = known.get(quantity)
                            if parsed is None:  # not a string parsed before
                                parsed = parse_quantity(quantity)
                                numbers = numbers or type(quantity) is not str
                            if parsed < _ZERO:  # the API server refuses it: so do we
                                raise ValueError(quantity)
                            if key == "cpu":
                                cpu = parsed
                            elif key == "memory":
                                memory = parsed
                    part = "limits"
                    limits = resources.limits
                    if limits:
                        for key, quantity in limits.items():
                            parsed = known.get(quantity)
                            if parsed is None:  # not a string parsed before
                                parsed = parse_quantity(quantity)
                                numbers = numbers or type(quantity) is not str
                            if parsed < _ZERO:
                                raise ValueError(quantity)
                            if key == "cpu":
                                limit_cpu = parsed
                            elif key == "memory":
                                limit_memory = parsed
                except (ValueError, ArithmeticError, TypeError):
                    bad = quantity_denial(field, name, part, key, quantity)
                    break
                out[name] = entry = {"requests": requests or {}, "limits": limits or {}}
                listed.append(entry)
                if not requests and not limits:
                    seen_best_effort = True
                    continue
                if cpu is None:
                    cpu = limit_cpu
                if memory is None:
                    memory = limit_memory
                if cpu != limit_cpu or memory != limit_memory:
                    burstable = True
                elif limit_cpu == _ZERO and limit_memory == _ZERO:
                    seen_best_effort = True
                elif limit_cpu == _ZERO or limit_memory == _ZERO:
                    burstable = True
                else:
                    seen_guaranteed = True
            if bad is not None:
                break
        if bad is not None:
            # The annotations are checked first: their refusal comes before the quantity's.
            names = [c.name for c in (*init, *containers)]
            check_annotations(dict(pairs), namespace, names, self.policy)
            raise bad
        if burstable or (seen_guaranteed and seen_best_effort):
            qos = "Burstable"
        else:
            qos = "Guaranteed" if seen_guaranteed else "BestEffort"
        pod_entry: dict[str, dict[str, str]] | None = None
        if spec.resources is not None and (spec.resources.requests or spec.resources.limits):
            pod_entry, by_pod = self._pod_level(spec, pairs, namespace)
            qos = by_pod or qos
        memo_key = (pairs, namespace, len(init), tuple(names), qos)
        classes: _Classes | None = self.parts.get(memo_key)
        if classes is None:
            classes = self._classes(pairs, namespace, names, len(init), qos)
            self.parts.put(memo_key, classes, deep_size(memo_key) + deep_size(classes))
        # The containers' classes come first in `classes`, the init containers' after.
        if init_entries:
            entries += init_entries
        for entry, found in zip(entries, classes):  # noqa: B905 (as long; strict= costs ~0.5 us)
            if found is not None:
                entry["classes"] = found
            if numbers:
                entry["requests"] = {k: quantity_text(v) for k, v in entry["requests"].items()}
                entry["limits"] = {k: quantity_text(v) for k, v in entry["limits"].items()}
        value: dict[str, Any] = {"containers": containers_out, "initContainers": init_out}
        if pod_entry is not None:
            value["pod"] = pod_entry
        return annotation_json(value)

    def _pod_level(
        self, spec: PodSpecS, pairs: Pairs, namespace: str
    ) -> tuple[dict[str, dict[str, str]], QoSClass | None]:
        """The annotation's `pod` entry and the QoS class the pod-level resources give (None:
        the containers decide). Rare, so the contract's plain code does it; a bad quantity is
        refused after the annotations' checks, as compute_annotation does."""
        resources = spec.resources
        assert resources is not None
        given = PodResourcesInput(
            tuple((resources.requests or {}).items()), tuple((resources.limits or {}).items())
        )
        try:
            check_pod_quantities(given)
        except Denial:
            names = [c.name for c in (*(spec.initContainers or ()), *spec.containers)]
            check_annotations(dict(pairs), namespace, names, self.policy)
            raise
        members = [
            PodContainer(
                (c.resources.requests or {}) if c.resources else {},
                (c.resources.limits or {}) if c.resources else {},
                init=init,
                restartable=init and c.restartPolicy == "Always",
            )
            for group, init in ((spec.initContainers or (), True), (spec.containers, False))
            for c in group
        ]
        by_pod = pod_level_qos(dict(given.requests), dict(given.limits), members)
        return pod_resources_entry(given), by_pod

    def _classes(
        self, pairs: Pairs, namespace: str, names: list[str], init: int, qos: str
    ) -> _Classes:
        """After the annotations' checks, each container's classes: the containers', then
        the init containers' (the order compute_annotation resolves them in)."""
        annotations = dict(pairs)
        check_annotations(annotations, namespace, names, self.policy)
        policy = self.policy
        return tuple(
            container_classes(annotations, name, qos=qos, namespace=namespace, policy=policy)
            for name in (*names[init:], *names[:init])
        )


def mutate_pod(pod: Mapping[str, Any], *, namespace: str, policy: Policy) -> Mutation:
    """One pod, uncached (tests and tools)."""
    return Mutator(policy, cache_bytes=0).mutate(pod, namespace)
