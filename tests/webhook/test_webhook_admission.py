"""AdmissionReview handling, in-process: versions, what is left alone, denials, bad bodies."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wh_support import (
    CONFIG_YAML,
    MALFORMED,
    RESOURCES_KEY,
    body,
    container,
    decode_patch,
    deployment_pod,
    patched_annotation,
    pod,
    review,
    with_field,
)

from enforcer.configuration import parse_config
from webhook.admission import review as handle
from webhook.mutation import Mutator, Policy

OPEN = Mutator(Policy())
CONFIGURED = Mutator(Policy.from_config(parse_config(yaml.safe_load(CONFIG_YAML))))


def answer(r: dict[str, Any], mutator: Mutator = OPEN) -> tuple[int, dict[str, Any]]:
    result = handle(body(r), mutator)
    return result.status, json.loads(result.body)


@pytest.mark.parametrize("version", ["admission.k8s.io/v1", "admission.k8s.io/v1beta1"])
def test_answered_in_the_same_version_with_the_uid(version: str) -> None:
    r = review(deployment_pod(), api_version=version, uid="a-b-c")
    status, out = answer(r)
    assert status == 200
    assert out["apiVersion"] == version and out["kind"] == "AdmissionReview"
    assert out["response"]["uid"] == "a-b-c" and out["response"]["allowed"] is True
    assert patched_annotation(r["request"]["object"], out)["containers"]["app"]["limits"] == {
        "cpu": "2",
        "memory": "1Gi",
    }


def test_update_is_mutated_too() -> None:
    p = deployment_pod(annotations={"rdtclass.resource-enforcer.dev/pod": "gold"})
    status, out = answer(review(p, operation="UPDATE", old=p))
    assert status == 200
    assert patched_annotation(p, out)["containers"]["app"]["classes"] == {"rdt": "gold"}


@pytest.mark.parametrize("operation", ["DELETE", "CONNECT"])
def test_delete_and_connect_are_allowed_unchanged(operation: str) -> None:
    obj = None if operation == "DELETE" else {"kind": "PodExecOptions", "command": ["sh"]}
    r = review(obj, operation=operation, old=deployment_pod(), sub_resource=None)
    status, out = answer(r)
    assert status == 200 and out["response"]["allowed"] is True and "patch" not in out["response"]


@pytest.mark.parametrize(
    ("kind", "resource", "obj"),
    [
        (
            {"group": "apps", "version": "v1", "kind": "Deployment"},
            {"group": "apps", "version": "v1", "resource": "deployments"},
            {"kind": "Deployment", "spec": {"template": {}}},
        ),
        (
            {"group": "", "version": "v1", "kind": "ConfigMap"},
            {"group": "", "version": "v1", "resource": "configmaps"},
            {"kind": "ConfigMap", "data": {"a": "b"}},
        ),
        (
            {"group": "example.com", "version": "v1", "kind": "Pod"},
            {"group": "example.com", "version": "v1", "resource": "pods"},
            {"kind": "Pod", "spec": "not a pod spec"},
        ),
        (
            {"group": "", "version": "v1", "kind": "Namespace"},
            {"group": "", "version": "v1", "resource": "namespaces"},
            [1, 2, 3],
        ),
    ],
)
def test_other_kinds_are_allowed_unchanged(kind: dict, resource: dict, obj: Any) -> None:
    status, out = answer(review(obj, kind=kind, resource=resource))
    assert status == 200 and out["response"] == {"uid": out["response"]["uid"], "allowed": True}


@pytest.mark.parametrize("sub", ["status", "ephemeralcontainers", "binding", "exec", "resize"])
def test_pod_subresources_are_allowed_unchanged(sub: str) -> None:
    status, out = answer(review(deployment_pod(), operation="UPDATE", sub_resource=sub))
    assert status == 200 and out["response"]["allowed"] is True and "patch" not in out["response"]


def test_pod_being_deleted_is_never_held_up() -> None:
    p = deployment_pod(annotations={"rdtclass.resource-enforcer.dev/pod": "$bad"})
    p["metadata"]["deletionTimestamp"] = "2026-11-20T10:00:00Z"
    status, out = answer(review(p, operation="UPDATE", old=p))
    assert status == 200 and out["response"]["allowed"] is True


def test_already_mutated_pod_gets_no_patch() -> None:
    p = deployment_pod()
    _, out = answer(review(p))
    from wh_support import apply

    again = apply(p, decode_patch(out))
    status, out2 = answer(review(again, operation="UPDATE", old=again))
    assert status == 200 and out2["response"]["allowed"] is True and "patch" not in out2["response"]


def test_spoofed_annotation_replaced_with_a_warning() -> None:
    p = deployment_pod(
        annotations={RESOURCES_KEY: '{"containers":{"app":{"classes":{"rdt":"gold"}}}}'}
    )
    _, out = answer(review(p))
    assert "classes" not in patched_annotation(p, out)["containers"]["app"]
    assert any(RESOURCES_KEY in w for w in out["response"]["warnings"])


def test_denial_is_a_well_formed_review() -> None:
    p = pod(
        [container("app")],
        annotations={"rdtclass.resource-enforcer.dev/pod": "gold"},
        namespace="dev",
    )
    status, out = answer(review(p, namespace="dev"), CONFIGURED)
    assert status == 200
    response = out["response"]
    assert response["allowed"] is False and "patch" not in response
    assert response["status"]["code"] == 403 and response["status"]["reason"] == "Forbidden"
    assert "rdtclass.resource-enforcer.dev/pod" in response["status"]["message"]


def test_namespace_falls_back_to_the_pod_then_default() -> None:
    p = pod(
        [container("app")],
        annotations={"rdtclass.resource-enforcer.dev/pod": "gold"},
        namespace="prod-a",
    )
    _, out = answer(review(p, namespace=None), CONFIGURED)
    assert out["response"]["allowed"] is True
    del p["metadata"]["namespace"]
    _, out = answer(review(p, namespace=None), CONFIGURED)
    assert (
        out["response"]["allowed"] is False and '"default"' in out["response"]["status"]["message"]
    )


def test_denial_reasons_and_codes() -> None:
    cases = {
        "malformed": ({"blockioclass.resource-policy.nri.io/container.app": "a/b"}, 400),
        "unknown": ({"blockio.resources.beta.kubernetes.io/pod": "nope"}, 400),
        "forbidden": ({"blockioclass.resource-enforcer.dev/pod": "fast"}, 403),
        "preference": ({"prefer-shared-cpus.resource-enforcer.dev/pod": "maybe"}, 400),
    }
    for reason, (wanted, code) in cases.items():
        result = handle(body(review(pod([container("app")], annotations=wanted))), CONFIGURED)
        response = json.loads(result.body)["response"]
        assert (result.outcome, result.reason, response["status"]["code"]) == (
            "denied",
            reason,
            code,
        )


# --- bodies that are not AdmissionReviews: HTTP 400 naming the field --------------------------


@pytest.mark.parametrize(("name", "raw", "message"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_body_is_a_400_naming_the_field(name: str, raw: bytes, message: str) -> None:
    result = handle(raw, OPEN)
    assert result.status == 400 and result.outcome == "invalid"
    error = json.loads(result.body)["error"]
    assert error.startswith(message), error


def test_malformed_review_of_another_kind_still_400() -> None:
    r = with_field("request.kind", {"group": "apps", "version": "v1"})
    result = handle(body(r), OPEN)
    assert (
        result.status == 400
        and "request.kind.kind: field required" in json.loads(result.body)["error"]
    )


# --- fuzz: whatever comes in, an answer and never an exception --------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _check(raw: bytes) -> None:
    result = handle(raw, CONFIGURED)
    assert result.status in (200, 400)
    out = json.loads(result.body)
    if result.status == 200:
        assert out["response"]["uid"] and isinstance(out["response"]["allowed"], bool)
        assert result.outcome != "error"
    else:
        assert isinstance(out["error"], str) and out["error"]


@FUZZ
@given(json_values)
def test_fuzz_random_json(value: Any) -> None:
    _check(json.dumps(value).encode())


@FUZZ
@given(st.binary(max_size=64))
def test_fuzz_random_bytes(raw: bytes) -> None:
    _check(raw)


def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*prefix, i))
    return out


_GOOD_PATHS = _paths(
    review(deployment_pod(annotations={"rdtclass.resource-enforcer.dev/pod": "gold"}))
)[1:]


@FUZZ
@given(st.sampled_from(_GOOD_PATHS), json_values)
def test_fuzz_one_field_of_a_real_review_replaced(path: tuple, value: Any) -> None:
    r = review(deployment_pod(annotations={"rdtclass.resource-enforcer.dev/pod": "gold"}))
    target = r
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    _check(json.dumps(r).encode())
