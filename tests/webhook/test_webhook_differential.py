"""The webhook's answers, byte for byte, against a reference made of the plain pieces.

The webhook decodes a review into msgspec Structs and computes the annotation in one pass
(`webhook.mutation.Mutator`), memoized by the bytes of the pod's relevant part. The reference
here reads the review with Python's `json`, computes the annotation with the contract's
`resource_contract.pod_annotation.build_annotation` (what `resource-enforcer plan` writes),
writes the patch with `json.dumps` and the answer as a dict: the two must give the same bytes
(annotation, patch, warnings, refusal messages) over the test corpus and generated pods, with
and without a configuration, memoized or not. And the Structs must accept exactly the reviews
the TypedDicts (`webhook.shapes`) accept, whose refusals name the field."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import msgspec
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wh_support import CONFIG_YAML, RESOURCES_KEY, container, deployment_pod, pod, review

from enforcer.configuration import parse_config
from resource_contract.pod_annotation import Denial, Policy, build_annotation
from webhook.admission import REPLACED_WARNING
from webhook.admission import review as handle
from webhook.mutation import Mutator, patch_for
from webhook.shapes import PodReview, ReviewS

CONFIGURED = Policy.from_config(parse_config(yaml.safe_load(CONFIG_YAML)))
OPEN = Policy()
POLICIES = {"open": OPEN, "configured": CONFIGURED}
# Memoized (one mutator per policy for the whole run, as in the server) and not.
MUTATORS = {
    (name, cached): Mutator(policy, cache_bytes=32 * 1024 * 1024 if cached else 0)
    for name, policy in POLICIES.items()
    for cached in (True, False)
}
_REASONS = {400: "BadRequest", 403: "Forbidden", 500: "InternalError"}


def reference(raw: bytes, policy: Policy) -> bytes:
    """The answer to a well-formed review of a pod, from the plain pieces."""
    document = json.loads(raw)
    request = document["request"]
    p = request["object"]
    metadata = p.get("metadata") or {}
    namespace = request.get("namespace") or metadata.get("namespace") or "default"
    answer: dict[str, Any] = {"uid": request["uid"], "allowed": True}
    if request["operation"] == "UPDATE" and metadata.get("deletionTimestamp"):
        pass
    else:
        try:
            value = build_annotation(p, namespace=namespace, policy=policy)
        except Denial as denial:
            answer["allowed"] = False
            answer["status"] = {
                "status": "Failure",
                "code": denial.code,
                "reason": _REASONS[denial.code],
                "message": denial.message,
            }
        else:
            annotations = metadata.get("annotations")
            existing = (annotations or {}).get(RESOURCES_KEY)
            if existing != value:
                shape = (
                    "no-metadata"
                    if p.get("metadata") is None
                    else "no-annotations"
                    if annotations is None
                    else "set"
                )
                patch = json.dumps(patch_for(shape, value), separators=(",", ":"))
                answer["patchType"] = "JSONPatch"
                answer["patch"] = base64.b64encode(patch.encode()).decode()
                if existing is not None:
                    answer["warnings"] = [REPLACED_WARNING]
    out = {"apiVersion": document["apiVersion"], "kind": "AdmissionReview", "response": answer}
    return json.dumps(out, separators=(",", ":")).encode()


def same_answer(r: dict[str, Any]) -> None:
    raw = json.dumps(r, separators=(",", ":")).encode()
    for (name, _), mutator in MUTATORS.items():
        expected = reference(raw, POLICIES[name])
        for _ in range(3):  # kept the second time, answered from the cache the third
            got = handle(raw, mutator)
            assert got.status == 200
            assert got.body == expected, (name, json.loads(got.body), json.loads(expected))


# --- the corpus ---------------------------------------------------------------------------------

GOLD = {"rdtclass.resource-enforcer.dev/pod": "gold"}
CORPUS = {
    "deployment": deployment_pod(),
    "deployment, gold": deployment_pod(annotations=dict(GOLD)),
    "no annotations map": deployment_pod(annotations=None),
    "already annotated": None,  # filled below
    "spoofed": deployment_pod(annotations={**GOLD, RESOURCES_KEY: "spoofed"}),
    "numbers": pod([container("app", {"cpu": 1, "memory": 2.5}, {"cpu": 1.0, "memory": 1e3})]),
    "zeros": pod([container("app", {"cpu": "0", "memory": "0"}, {"cpu": "1", "memory": "1Gi"})]),
    "equal in value": pod(
        [container("app", {"cpu": "1000m", "memory": "1024Mi"}, {"cpu": "1", "memory": "1Gi"})]
    ),
    "bad quantity": pod([container("app", {"cpu": "lots"})]),
    "bad quantity and bad class": pod(
        [container("app", {"cpu": "lots"})],
        annotations={"rdtclass.resource-enforcer.dev/pod": "../x"},
    ),
    "bad limit": pod([container("app", {"cpu": "1"}, {"memory": "1e99"})]),
    "unknown class": deployment_pod(annotations={"rdtclass.resource-enforcer.dev/pod": "nope"}),
    "forbidden class": deployment_pod(
        annotations={"rdtclass.resource-enforcer.dev/container.app": "gold"}, namespace="other"
    ),
    "bad preference": deployment_pod(
        annotations={"prefer-isolated-cpus.resource-policy.nri.io": "x"}
    ),
    "no containers' resources": pod([{"name": "a"}, {"name": "b", "resources": None}]),
    "duplicate names": pod([container("a", {"cpu": "1"}), container("a", {"cpu": "2"})]),
    "unicode annotation": deployment_pod(
        annotations={"rdtclass.resource-enforcer.dev/pod": "gölд"}
    ),
}
_annotated = deployment_pod(annotations=dict(GOLD))
_annotated["metadata"]["annotations"][RESOURCES_KEY] = build_annotation(
    _annotated, namespace="shop", policy=OPEN
)
CORPUS["already annotated"] = _annotated
_no_metadata = deployment_pod()
del _no_metadata["metadata"]
CORPUS["no metadata"] = _no_metadata
_null_annotations = deployment_pod()
_null_annotations["metadata"]["annotations"] = None
CORPUS["null annotations"] = _null_annotations
_deleting = deployment_pod()
_deleting["metadata"]["deletionTimestamp"] = "2026-11-20T10:00:00Z"


@pytest.mark.parametrize("name", sorted(CORPUS))
@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
def test_the_corpus_is_answered_as_the_reference_answers_it(name: str, operation: str) -> None:
    for namespace in ("shop", None):
        same_answer(review(copy.deepcopy(CORPUS[name]), operation=operation, namespace=namespace))


def test_a_pod_being_deleted_is_answered_as_the_reference_answers_it() -> None:
    same_answer(review(_deleting, operation="UPDATE"))


def test_the_benchmarks_distinct_pods_are_answered_as_the_reference_answers_them() -> None:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: bench/
    from bench.webhook_review import distinct_body, distinct_template

    template = distinct_template()
    for n in range(50):
        same_answer(json.loads(distinct_body(template, n)))


# --- generated pods -----------------------------------------------------------------------------

names = st.from_regex(r"[a-z][a-z0-9-]{0,8}", fullmatch=True)
quantity = st.one_of(
    st.sampled_from(["100m", "1", "2", "0", "0.5", "1500m", "1Gi", "1024Mi", "1e3", "-1", "1k"]),
    st.sampled_from(["lots", "1 ", "1e400", "+", ""]),  # refused
    st.integers(-(2**63) + 1, 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
)
resource_map = st.dictionaries(
    st.sampled_from(["cpu", "memory", "ephemeral-storage", "example.com/gpu"]), quantity, max_size=3
)
annotation_keys = st.sampled_from(
    [
        "rdtclass.resource-enforcer.dev/pod",
        "rdtclass.resource-enforcer.dev/container.{c}",
        "blockioclass.resource-enforcer.dev/pod",
        "blockio.resources.beta.kubernetes.io/container.{c}",
        "prefer-isolated-cpus.resource-policy.nri.io",
        "prefer-shared-cpus.resource-policy.nri.io/container.{c}",
        "cpu.preserve.resource-policy.nri.io",
        "balloon.balloons.resource-policy.nri.io",
        "cpuclass.resource-enforcer.dev/pod",
        "example.com/other",
        RESOURCES_KEY,
    ]
)
annotation_values = st.sampled_from(
    ["gold", "silver", "fast", "throttled", "Burstable", "true", "false", "x", "../x", ""]
)


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    all_names = draw(st.lists(names, min_size=1, max_size=5))
    split = draw(st.integers(1, len(all_names)))

    def group(group_names: list[str]) -> list[dict[str, Any]]:
        out = []
        for n in group_names:
            shape = draw(st.sampled_from(["none", "null", "empty", "some"]))
            if shape == "none":
                out.append({"name": n})
            elif shape == "null":
                out.append({"name": n, "resources": None})
            else:
                requests = None if shape == "empty" else draw(st.none() | resource_map)
                limits = None if shape == "empty" else draw(st.none() | resource_map)
                out.append(container(n, requests, limits))
            if draw(st.integers(0, 3)) == 0:
                out[-1]["restartPolicy"] = "Always"  # a sidecar, when an init container
        return out

    annotations = None
    if draw(st.booleans()):
        annotations = {}
        for _ in range(draw(st.integers(0, 4))):
            key = draw(annotation_keys).format(c=draw(st.sampled_from([*all_names, "ghost"])))
            annotations[key] = draw(annotation_values)
    p = pod(
        group(all_names[:split]),
        init_containers=group(all_names[split:]) if draw(st.booleans()) else None,
        annotations=annotations,
        namespace=draw(st.sampled_from(["shop", "kube-system", "other"])),
    )
    # Pod-level resources (spec.resources): absent, empty, or maps like the containers'.
    pod_level = draw(st.sampled_from(["absent", "null", "empty", "some"]))
    if pod_level == "null":
        p["spec"]["resources"] = None
    elif pod_level == "empty":
        p["spec"]["resources"] = {}
    elif pod_level == "some":
        p["spec"]["resources"] = {
            "requests": draw(st.none() | resource_map),
            "limits": draw(st.none() | resource_map),
        }
    metadata = draw(st.sampled_from(["kept", "null annotations", "none"]))
    if metadata == "null annotations":
        p["metadata"]["annotations"] = None
    elif metadata == "none":
        del p["metadata"]
    return p


DIFF = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@DIFF
@given(pods(), st.sampled_from(["CREATE", "UPDATE"]))
def test_generated_pods_are_answered_as_the_reference_answers_them(
    p: dict[str, Any], operation: str
) -> None:
    same_answer(review(p, operation=operation))


# --- the Structs read what the TypedDicts read --------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=6),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=12,
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*prefix, i))
    return out


_REVIEW = review(deployment_pod(annotations=dict(GOLD)), old=None)
_REVIEW["request"]["object"]["spec"]["containers"][1]["resources"]["limits"]["cpu"] = 2
# Pod-level resources and a sidecar's restartPolicy: read by the webhook too.
_REVIEW["request"]["object"]["spec"]["resources"] = {"requests": {"cpu": "3"}, "limits": {}}
_REVIEW["request"]["object"]["spec"]["containers"][0]["restartPolicy"] = "Always"
_FIELDS = _paths(_REVIEW)[1:]
_FIELD_NAMES = sorted({str(p[-1]) for p in _FIELDS if isinstance(p[-1], str)})


def _plain(value: Any) -> Any:
    return msgspec.to_builtins(value)


def _agree(raw: bytes) -> None:
    try:
        typed = msgspec.json.decode(raw, type=PodReview)
    except (msgspec.ValidationError, msgspec.DecodeError):
        typed = None
    try:
        struct = msgspec.json.decode(raw, type=ReviewS)
    except (msgspec.ValidationError, msgspec.DecodeError):
        struct = None
    assert (typed is None) == (struct is None), raw
    if typed is not None:
        # The same values (absent and null read alike as None; a missing group as "").
        t_req, s_req = typed["request"], struct.request  # type: ignore[union-attr]
        assert s_req.uid == t_req["uid"] and s_req.operation == t_req["operation"]
        assert s_req.namespace == t_req.get("namespace")
        assert s_req.subResource == t_req.get("subResource")
        assert s_req.kind.group == t_req["kind"].get("group", "")
        assert s_req.resource.group == t_req["resource"].get("group", "")
        t_pod, s_pod = t_req.get("object"), s_req.object
        assert (t_pod is None) == (s_pod is None)
        if t_pod is not None and s_pod is not None:
            assert _plain(s_pod.spec) == {
                "containers": [_container(c) for c in t_pod["spec"]["containers"]],
                "initContainers": None
                if t_pod["spec"].get("initContainers") is None
                else [_container(c) for c in t_pod["spec"]["initContainers"]],
                "resources": _resources(t_pod["spec"]),
            }
            t_meta = t_pod.get("metadata")
            assert (t_meta is None) == (s_pod.metadata is None)
            if t_meta is not None and s_pod.metadata is not None:
                for field in ("name", "generateName", "namespace", "annotations"):
                    assert getattr(s_pod.metadata, field) == t_meta.get(field)


def _container(c: Any) -> Any:
    return {"name": c["name"], "resources": _resources(c), "restartPolicy": c.get("restartPolicy")}


def _resources(c: Any) -> Any:
    r = c.get("resources")
    if r is None:
        return None
    return {"requests": r.get("requests"), "limits": r.get("limits")}


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(_FIELDS), json_values | st.sampled_from([None, "", 2**63, 1.5, [], {}]))
def test_the_structs_accept_what_the_typeddicts_accept(path: tuple[Any, ...], value: Any) -> None:
    r = copy.deepcopy(_REVIEW)
    target = r
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    _agree(json.dumps(r).encode())
    del target[path[-1]]  # and without the field
    _agree(json.dumps(r).encode())
