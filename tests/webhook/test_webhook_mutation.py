"""The mutation itself: pod -> annotation -> JSON Patch, against an oracle written from the
contract (docs/webhook.md, CONTRACT.md), not from the code under test."""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mutation_oracle import CONFIGURED, OPEN, contract_keys, expected, run
from wh_support import RESOURCES_KEY, annotation, apply, container, pod

from resource_contract.pod_annotation import build_annotation, is_request_key, quantity_text
from webhook.mutation import ANNOTATION_PATH, Mutator, escape_pointer_token, mutate_pod

# --- hypothesis strategies ---------------------------------------------------------------------

names = st.from_regex(r"[a-z][a-z0-9-]{0,12}", fullmatch=True)
quantity = st.one_of(
    st.sampled_from(["100m", "1", "2", "0.5", "1500m", "1Gi", "512Mi", "128974848", "129e6", "1k"]),
    st.integers(0, 10**6),
    st.sampled_from([0.5, 1.0, 2.25]),
)
resource_names = st.sampled_from(
    ["cpu", "memory", "ephemeral-storage", "hugepages-2Mi", "example.com/gpu"]
)
resource_map = st.dictionaries(resource_names, quantity, max_size=4)
class_names = st.sampled_from(["gold", "silver", "bronze", "Burstable", "a.b_c-9"])
other_annotations = st.dictionaries(
    st.from_regex(r"[a-z]{1,8}\.example/[a-z~/]{1,8}", fullmatch=True),
    st.text(max_size=12),
    max_size=4,
)


@st.composite
def containers_of(draw: st.DrawFn, names_: list[str]) -> list[dict[str, Any]]:
    out = []
    for n in names_:
        shape = draw(st.sampled_from(["none", "empty", "some"]))
        if shape == "none":
            c = {"name": n}
        elif shape == "empty":
            c = {"name": n, "resources": {}}
        else:
            c = container(n, draw(st.none() | resource_map), draw(st.none() | resource_map))
        out.append(c)
    return out


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    all_names = draw(st.lists(names, min_size=1, max_size=6, unique=True))
    split = draw(st.integers(1, len(all_names)))
    main, init = all_names[:split], all_names[split:]
    containers = draw(containers_of(main))
    init_containers = draw(containers_of(init))
    # Sidecars: init containers that keep running.
    for c in init_containers:
        if draw(st.booleans()):
            c["restartPolicy"] = "Always"
    annotations = draw(st.none() | other_annotations)
    if annotations is not None and draw(st.booleans()):
        # Class requests for real containers, unknown containers and the pod, every dialect.
        for _ in range(draw(st.integers(0, 6))):
            kind = draw(st.sampled_from(["rdt", "blockio"]))
            target = draw(st.sampled_from([*all_names, "ghost"]))
            key = draw(st.sampled_from(contract_keys(kind, target)))
            annotations[key] = draw(class_names)
    if annotations is not None and draw(st.booleans()):
        annotations[RESOURCES_KEY] = draw(
            st.sampled_from(
                ['{"containers":{}}', "spoofed", '{"containers":{"x":{"classes":{"rdt":"gold"}}}}']
            )
        )
    p = pod(containers, init_containers=init_containers or None, annotations=annotations)
    if draw(st.booleans()):
        p["spec"]["ephemeralContainers"] = [{"name": "debugger", "image": "busybox"}]
    return p


FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(pods())
def test_patch_gives_exactly_the_expected_annotation(p: dict[str, Any]) -> None:
    out = run(p)
    assert annotation(out) == expected(p)
    # Nothing else changed: other annotations kept, the rest of the pod identical.
    before = copy.deepcopy(p)
    before["metadata"].setdefault("annotations", {})
    before["metadata"]["annotations"] = dict(before["metadata"]["annotations"] or {})
    before["metadata"]["annotations"].pop(RESOURCES_KEY, None)
    after = copy.deepcopy(out)
    del after["metadata"]["annotations"][RESOURCES_KEY]
    assert after == before


@FAST
@given(pods())
def test_second_pass_changes_nothing(p: dict[str, Any]) -> None:
    m = mutate_pod(p, namespace="shop", policy=OPEN)
    once = apply(p, m.patch)
    assert mutate_pod(once, namespace="shop", policy=OPEN).patch == []
    # The same patch applied again (a reinvocation that re-sent it) is a no-op.
    assert apply(once, m.patch) == once


@FAST
@given(pods())
def test_spoofed_annotation_is_always_overwritten(p: dict[str, Any]) -> None:
    p["metadata"]["annotations"] = {**(p["metadata"].get("annotations") or {}), RESOURCES_KEY: "{}"}
    m = mutate_pod(p, namespace="shop", policy=OPEN)
    assert m.replaced == "{}"
    assert annotation(apply(p, m.patch)) == expected(p)


@FAST
@given(pods())
def test_memoized_mutator_agrees_with_a_fresh_computation(p: dict[str, Any]) -> None:
    mutator = Mutator(OPEN)
    first = mutator.mutate(p, "shop")
    again = mutator.mutate(copy.deepcopy(p), "shop")
    assert first == again == mutate_pod(p, namespace="shop", policy=OPEN)


@st.composite
def configured_pods(draw: st.DrawFn) -> dict[str, Any]:
    """Pods whose class requests the test configuration allows in namespace shop."""
    p = draw(pods())
    annotations = p["metadata"].get("annotations")
    if annotations:
        for key in list(annotations):
            if is_request_key(key):
                kind = "rdt" if "rdt" in key else "blockio"
                allowed = ["silver", "gold", "Burstable"] if kind == "rdt" else ["throttled"]
                annotations[key] = draw(st.sampled_from(allowed))
    return p


@FAST
@given(configured_pods())
def test_with_configuration_the_qos_class_is_the_default(p: dict[str, Any]) -> None:
    assert annotation(run(p, CONFIGURED)) == expected(p, configured=True)


def test_json_numbers_become_their_text() -> None:
    assert quantity_text(2) == "2"
    assert quantity_text(0.5) == "0.5"
    assert quantity_text(2.0) == "2"
    assert quantity_text("1500m") == "1500m"


# --- the JSON Patch ----------------------------------------------------------------------------


def test_key_is_escaped_in_the_patch_path() -> None:
    assert escape_pointer_token("a~b/c") == "a~0b~1c"
    assert ANNOTATION_PATH == "/metadata/annotations/resource-enforcer.dev~1resources"


def test_absent_annotations_map_is_added_whole() -> None:
    p = pod([container("app", {"cpu": "1"})])
    patch = mutate_pod(p, namespace="shop", policy=OPEN).patch
    assert patch == [
        {
            "op": "add",
            "path": "/metadata/annotations",
            "value": {
                RESOURCES_KEY: '{"containers":{"app":{"requests":{"cpu":"1"},"limits":{}}},'
                '"initContainers":{}}'
            },
        }
    ]


def test_null_annotations_map_is_replaced() -> None:
    p = pod([container("app")], annotations=None)
    p["metadata"]["annotations"] = None
    out = run(p)
    assert annotation(out) == {
        "containers": {"app": {"requests": {}, "limits": {}}},
        "initContainers": {},
    }


def test_existing_annotations_are_kept() -> None:
    p = pod([container("app")], annotations={"team": "shop", "a~b/c": "x"})
    out = run(p)
    assert out["metadata"]["annotations"]["team"] == "shop"
    assert out["metadata"]["annotations"]["a~b/c"] == "x"
    patch = mutate_pod(p, namespace="shop", policy=OPEN).patch
    assert patch == [{"op": "add", "path": ANNOTATION_PATH, "value": patch[0]["value"]}]


def test_pod_without_metadata_gets_it() -> None:
    p = {"spec": {"containers": [{"name": "app"}]}}
    assert annotation(run(p))["containers"] == {"app": {"requests": {}, "limits": {}}}


def test_annotation_format_matches_the_contract_example() -> None:
    p = pod(
        [container("app", {"cpu": "2", "memory": "1Gi"}, {"cpu": "2", "memory": "1Gi"})],
        init_containers=[container("setup", {"cpu": "100m"})],
        annotations={
            "rdtclass.resource-enforcer.dev/container.app": "gold",
            "blockioclass.resource-enforcer.dev/container.app": "throttled",
        },
    )
    value = build_annotation(p, namespace="shop", policy=OPEN)
    assert value == (
        '{"containers":{"app":{"requests":{"cpu":"2","memory":"1Gi"},'
        '"limits":{"cpu":"2","memory":"1Gi"},"classes":{"rdt":"gold","blockio":"throttled"}}},'
        '"initContainers":{"setup":{"requests":{"cpu":"100m"},"limits":{}}}}'
    )


def test_ephemeral_containers_are_left_out() -> None:
    p = pod([container("app")])
    p["spec"]["ephemeralContainers"] = [{"name": "debug", "image": "busybox"}]
    out = annotation(run(p))
    assert "debug" not in out["containers"] and "debug" not in out["initContainers"]


def test_sidecars_are_init_containers_in_the_annotation() -> None:
    p = pod(
        [container("app", {"cpu": "1"})],
        init_containers=[
            container("setup", {"cpu": "100m"}),
            container("proxy", {"cpu": "200m"}, restartPolicy="Always"),
        ],
    )
    assert list(annotation(run(p))["initContainers"]) == ["setup", "proxy"]


def test_request_key_filter_covers_every_class_and_preference_key() -> None:
    from resource_contract.classes import class_keys
    from resource_contract.preferences import PREFERENCES, preference_keys

    for kind in ("rdt", "blockio"):
        assert all(is_request_key(k) for k in class_keys(kind, "c"))  # type: ignore[arg-type]
    for name in PREFERENCES:
        assert all(is_request_key(k) for k in preference_keys(name, "c"))
    assert not is_request_key("kubectl.kubernetes.io/restartedAt")


def test_annotation_is_deterministic_json() -> None:
    p = pod([container("b", {"memory": "1Gi", "cpu": "1"}), container("a")])
    value = build_annotation(p, namespace="shop", policy=OPEN)
    assert value == build_annotation(copy.deepcopy(p), namespace="shop", policy=OPEN)
    assert list(json.loads(value)["containers"]) == ["b", "a"]  # spec order
    assert list(json.loads(value)["containers"]["b"]["requests"]) == ["memory", "cpu"]


_TEXT = st.text(alphabet=st.characters(max_codepoint=0x2FF), max_size=6)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_TEXT, st.dictionaries(_TEXT, _TEXT | st.dictionaries(_TEXT, _TEXT))))
def test_the_fast_annotation_encoder_writes_what_json_dumps_writes(value: dict) -> None:
    from resource_contract.pod_annotation import compact_json
    from webhook.mutation import annotation_json

    assert annotation_json(value) == compact_json(value)
