"""The QoS class of pods with pod-level resources (`spec.resources`), by Kubernetes' rules.

The expectations are Kubernetes 1.37's (`k8s.io/kubernetes` v1.37.2): the API server defaults
the pod-level values (`pkg/api/pod.DefaultPodLevelResources`) and `ComputePodQOS` classes the pod
by them alone when it has any (`PodLevelResourcesFixKubeletQOSClass`); each row says why.
The same table goes through the contract's `qos_class`, the annotation the webhook and `plan`
compute, and the webhook's own fast path.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from resource_contract.pod_annotation import Denial, Policy, build_annotation
from resource_contract.pod_resources import (
    PodContainer,
    default_pod_resources,
    spec_containers,
)
from resource_contract.qos import qos_class
from resource_contract.quantities import parse_quantity
from resource_contract.resources import ResourcesAnnotation
from webhook.mutation import mutate_pod


def c(name: str, requests: dict | None = None, limits: dict | None = None, **extra: Any) -> dict:
    out: dict[str, Any] = {"name": name, **extra}
    if requests is not None or limits is not None:
        out["resources"] = {k: v for k, v in (("requests", requests), ("limits", limits)) if v}
    return out


GUARANTEED_1 = {"cpu": "1", "memory": "1Gi"}
POD_2 = {"cpu": "2", "memory": "2Gi"}

# (id, spec.resources or None, containers, init containers, expected QoS, why)
TABLE: list[tuple[str, dict | None, list, list, str]] = [
    # Pod-level requests == limits, containers without resources: Guaranteed.
    (
        "pod-equal-bare-containers",
        {"requests": POD_2, "limits": POD_2},
        [c("a"), c("b")],
        [],
        "Guaranteed",
    ),
    # Pod-level requests only: no limit can be defaulted (no container has one): Burstable.
    ("pod-requests-only", {"requests": POD_2}, [c("a")], [], "Burstable"),
    # Pod-level limits only: the requests default to them: Guaranteed.
    ("pod-limits-only", {"limits": POD_2}, [c("a"), c("b")], [], "Guaranteed"),
    # Pod-level limit for cpu only: cpu Guaranteed-shaped, memory BestEffort-shaped: Burstable.
    ("pod-cpu-limit-only", {"limits": {"cpu": "2"}}, [c("a")], [], "Burstable"),
    # Pod-level requests below limits: Burstable.
    (
        "pod-requests-below",
        {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": POD_2},
        [c("a")],
        [],
        "Burstable",
    ),
    # Pod-level limits; a container's request becomes the pod's request (aggregated): 1 != 2.
    (
        "pod-limits-container-request",
        {"limits": POD_2},
        [c("a", {"cpu": "1"}), c("b")],
        [],
        "Burstable",
    ),
    # Pod-level requests; every container has limits: the pod limits default to
    # max(pod request, aggregated limits) = the request: Guaranteed.
    (
        "pod-requests-container-limits",
        {"requests": POD_2},
        [c("a", None, {"cpu": "2", "memory": "2Gi"})],
        [],
        "Guaranteed",
    ),
    # The same with one container lacking a memory limit: no pod memory limit: Burstable.
    (
        "pod-requests-some-limits",
        {"requests": POD_2},
        [c("a", None, {"cpu": "2", "memory": "2Gi"}), c("b", None, {"cpu": "1"})],
        [],
        "Burstable",
    ),
    # Pod-level requests over Guaranteed containers: the pod limits default to
    # max(pod request 2, aggregated limits 1) = 2 = the request: Guaranteed.
    (
        "pod-requests-over-guaranteed-containers",
        {"requests": POD_2},
        [c("a", GUARANTEED_1, GUARANTEED_1)],
        [],
        "Guaranteed",
    ),
    # Pod-level resources win over Guaranteed containers (KEP-2837's note): request != limit.
    (
        "pod-burstable-over-guaranteed-containers",
        {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": POD_2},
        [c("a", GUARANTEED_1, GUARANTEED_1)],
        [],
        "Burstable",
    ),
    # Pod-level Guaranteed over Burstable containers.
    (
        "pod-equal-burstable-containers",
        {"requests": POD_2, "limits": POD_2},
        [c("a", {"cpu": "1"})],
        [],
        "Guaranteed",
    ),
    # Zero pod-level requests and limits: BestEffort.
    ("pod-zero", {"requests": {"cpu": "0", "memory": "0"}}, [c("a")], [], "BestEffort"),
    # Only hugepages at pod level: they count as pod-level resources; cpu and memory unset.
    ("pod-hugepages-only", {"limits": {"hugepages-2Mi": "2Mi"}}, [c("a")], [], "BestEffort"),
    # A sidecar adds up with the app container: 1 + 1 = the pod limit 2: Guaranteed cpu; the
    # memory request defaults to the limit (no container asked for memory).
    (
        "pod-limits-sidecar",
        {"limits": POD_2},
        [c("a", {"cpu": "1"})],
        [c("s", {"cpu": "1"}, restartPolicy="Always")],
        "Guaranteed",
    ),
    # A plain init container counts at its peak (max(1, 1) = 1 != 2): Burstable.
    (
        "pod-limits-init",
        {"limits": POD_2},
        [c("a", {"cpu": "1"})],
        [c("i", {"cpu": "1"})],
        "Burstable",
    ),
    # Empty or unsupported-only spec.resources: not pod-level resources; containers decide.
    ("empty-resources", {}, [c("a", GUARANTEED_1, GUARANTEED_1)], [], "Guaranteed"),
    (
        "empty-maps",
        {"requests": {}, "limits": {}},
        [c("a", GUARANTEED_1, GUARANTEED_1)],
        [],
        "Guaranteed",
    ),
    (
        "unsupported-only",
        {"requests": {"ephemeral-storage": "1Gi"}},
        [c("a", GUARANTEED_1, GUARANTEED_1)],
        [],
        "Guaranteed",
    ),
    # No pod-level resources: as before.
    ("none-guaranteed", None, [c("a", GUARANTEED_1, GUARANTEED_1)], [], "Guaranteed"),
    ("none-burstable", None, [c("a", {"cpu": "1"})], [], "Burstable"),
    ("none-besteffort", None, [c("a")], [], "BestEffort"),
]


def spec_of(resources: dict | None, containers: list, init: list) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": containers}
    if init:
        spec["initContainers"] = init
    if resources is not None:
        spec["resources"] = resources
    return spec


@pytest.mark.parametrize(
    ("resources", "containers", "init", "qos"), [t[1:] for t in TABLE], ids=[t[0] for t in TABLE]
)
def test_qos_class_follows_kubernetes(
    resources: dict | None, containers: list, init: list, qos: str
) -> None:
    assert qos_class(spec_of(resources, containers, init)) == qos


POLICY = Policy.from_config(None)


@pytest.mark.parametrize(
    ("resources", "containers", "init", "qos"), [t[1:] for t in TABLE], ids=[t[0] for t in TABLE]
)
def test_the_annotation_records_the_pod_key_exactly_as_written(
    resources: dict | None, containers: list, init: list, qos: str
) -> None:
    pod = {"metadata": {"name": "p"}, "spec": spec_of(resources, containers, init)}
    text = build_annotation(pod, namespace="default", policy=POLICY)
    assert mutate_pod(pod, namespace="default", policy=POLICY).annotation == text
    data = json.loads(text)
    has_pod_level = bool(resources and (resources.get("requests") or resources.get("limits")))
    if has_pod_level:
        assert resources is not None
        assert data["pod"] == {
            "requests": resources.get("requests", {}),
            "limits": resources.get("limits", {}),
        }
    else:
        assert "pod" not in data
    # The enforcer's reader takes it back.
    parsed = ResourcesAnnotation.parse(text, key="resource-enforcer.dev/resources")
    assert (parsed.pod is not None) == has_pod_level


def test_a_qos_named_class_follows_the_pod_level_class() -> None:
    """The default RDT class is the QoS class's name: a pod Guaranteed by its pod-level
    resources gets the Guaranteed class, not the BestEffort one its containers alone would."""
    from resource_contract.pod_annotation import container_classes

    policy = Policy(
        configured={"rdt": frozenset({"Guaranteed", "BestEffort"}), "blockio": frozenset()}
    )
    pod = {"spec": {"resources": {"requests": POD_2, "limits": POD_2}, "containers": [c("a")]}}
    data = json.loads(build_annotation(pod, namespace="default", policy=policy))
    assert data["containers"]["a"]["classes"] == {"rdt": "Guaranteed"}
    assert json.loads(mutate_pod(pod, namespace="default", policy=policy).annotation) == data
    assert container_classes({}, "a", qos="BestEffort", namespace="d", policy=policy) == {
        "rdt": "BestEffort"
    }


@pytest.mark.parametrize(
    ("resources", "message"),
    [
        ({"requests": {"cpu": "-1"}}, 'spec.resources.requests.cpu: "-1" must not be negative'),
        (
            {"limits": {"memory": "-1Gi"}},
            'spec.resources.limits.memory: "-1Gi" must not be negative',
        ),
        ({"limits": {"cpu": "two"}}, 'spec.resources.limits.cpu: "two" is not a valid quantity'),
        (
            {"requests": {"cpu": "1e999"}},
            'spec.resources.requests.cpu: "1e999" is not a valid quantity',
        ),
    ],
)
def test_bad_pod_level_quantities_are_refused_naming_the_field(
    resources: dict, message: str
) -> None:
    pod = {"spec": {"resources": resources, "containers": [c("a")]}}
    for compute in (
        lambda: build_annotation(pod, namespace="d", policy=POLICY),
        lambda: mutate_pod(pod, namespace="d", policy=POLICY),
    ):
        with pytest.raises(Denial) as caught:
            compute()
        assert caught.value.code == 400
        assert caught.value.message == message


# --- properties --------------------------------------------------------------------------------

quantities = st.sampled_from(["0", "500m", "1", "2", "3", "1Gi", "2Gi", "100Mi"])
resource_maps = st.dictionaries(
    st.sampled_from(["cpu", "memory", "hugepages-2Mi"]), quantities, max_size=3
)
containers_st = st.lists(
    st.builds(
        PodContainer,
        requests=resource_maps,
        limits=resource_maps,
        init=st.booleans(),
        restartable=st.booleans(),
    ),
    min_size=1,
    max_size=4,
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(resource_maps, resource_maps, containers_st)
def test_defaulting_is_idempotent_and_keeps_what_was_written(
    requests: dict, limits: dict, members: list[PodContainer]
) -> None:
    """What the API server stores it would store again; written values are never changed."""
    once = default_pod_resources(requests, limits, members)
    assert default_pod_resources(*once, members) == once
    for written, defaulted in ((requests, once[0]), (limits, once[1])):
        for name, value in written.items():
            assert defaulted[name] == parse_quantity(value)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["1", "2", "3"]), st.sampled_from(["1Gi", "2Gi"]), containers_st)
def test_pod_level_requests_equal_to_limits_are_guaranteed_whatever_the_containers(
    cpu: str, memory: str, members: list[PodContainer]
) -> None:
    budget = {"cpu": cpu, "memory": memory}
    spec = {
        "resources": {"requests": budget, "limits": budget},
        "containers": [c(f"c{i}", dict(m.requests), dict(m.limits)) for i, m in enumerate(members)],
    }
    assert qos_class(spec) == "Guaranteed"


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["1", "2"]), st.sampled_from(["1Gi", "2Gi"]), st.integers(1, 4))
def test_pod_level_limits_alone_with_bare_containers_are_guaranteed(
    cpu: str, memory: str, count: int
) -> None:
    spec = {
        "resources": {"limits": {"cpu": cpu, "memory": memory}},
        "containers": [c(f"c{i}") for i in range(count)],
    }
    assert qos_class(spec) == "Guaranteed"
    assert spec_containers(spec)[0] == PodContainer({}, {})


@settings(max_examples=300, deadline=None)
@given(
    containers_st,
    st.sampled_from([None, {}, {"requests": {}}, {"limits": {"ephemeral-storage": "1"}}]),
)
def test_without_pod_level_resources_the_containers_decide_as_before(
    members: list[PodContainer], empty: dict | None
) -> None:
    containers = [c(f"c{i}", dict(m.requests), dict(m.limits)) for i, m in enumerate(members)]
    assert qos_class(spec_of(empty, containers, [])) == qos_class({"containers": containers})


# --- against Kubernetes' own code --------------------------------------------------------------

GOLDEN = Path(__file__).parents[1] / "testdata" / "k8s-qos" / "pods-v1.37.2.jsonl"
_GOLDEN = [json.loads(line) for line in GOLDEN.read_text().splitlines()]


def test_the_classes_are_those_kubernetes_own_code_gives() -> None:
    """300 pods classed by k8s.io/kubernetes v1.37.2 (testdata/k8s-qos/README.md), through the
    contract's qos_class and the webhook's fast path (its QoS-named default class shows it)."""
    policy = Policy(
        configured={
            "rdt": frozenset({"Guaranteed", "Burstable", "BestEffort"}),
            "blockio": frozenset(),
        }
    )
    wrong = []
    for i, row in enumerate(_GOLDEN):
        spec = row["spec"]
        if qos_class(spec) != row["qos"]:
            wrong.append((i, "qos_class", qos_class(spec), row["qos"]))
        try:
            value = json.loads(mutate_pod({"spec": spec}, namespace="d", policy=policy).annotation)
        except Denial:
            continue  # a quantity the enforcer cannot read is refused before any class
        first = next(iter(value["containers"].values()))
        if first["classes"]["rdt"] != row["qos"]:
            wrong.append((i, "webhook", first["classes"]["rdt"], row["qos"]))
    assert wrong == []
