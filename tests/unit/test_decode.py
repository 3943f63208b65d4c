"""Decoding CreateContainer requests as kubelet sends them (built by the kubelet emulator),
through the CRI adapter into the core's decoder."""

from __future__ import annotations

import json

import pytest

from enforcer.cri import api_pb2
from enforcer.cri.convert import container_create
from enforcer.decode import ClassSettings, ContainerRequest, DecodeError, decode_container
from enforcer.refusal import Reason
from resource_contract.classes import ClassAccess
from resource_contract.config import parse_config
from tests.support.kubelet import container_config_for, sandbox_config_for

UID = "0b5c9c5e-1111-4a4a-9c9c-123456789abc"


def pod(resources: dict, annotations: dict | None = None, name: str = "app") -> dict:
    return {
        "metadata": {"name": "web", "namespace": "prod", "annotations": annotations or {}},
        "spec": {"containers": [{"name": name, "image": "busybox", "resources": resources}]},
    }


def request(manifest: dict, *, driver: str = "cgroupfs") -> api_pb2.CreateContainerRequest:
    container = manifest["spec"]["containers"][0]
    return api_pb2.CreateContainerRequest(
        pod_sandbox_id="sandbox",
        config=container_config_for(manifest, container, UID, memory_capacity=8 << 30),
        sandbox_config=sandbox_config_for(manifest, UID, cgroup_driver=driver),
    )


def decode(req: api_pb2.CreateContainerRequest, **kwargs: object) -> ContainerRequest:
    return decode_container(container_create(req), **kwargs)  # type: ignore[arg-type]


def annotation(requests: dict, limits: dict, key: str = "resource-enforcer.dev/resources") -> dict:
    value = {"containers": {"app": {"requests": requests, "limits": limits}}, "initContainers": {}}
    return {key: json.dumps(value)}


G2 = {"cpu": "2", "memory": "1Gi"}


@pytest.mark.parametrize("driver", ["cgroupfs", "systemd"])
def test_guaranteed_from_the_webhook_annotation(driver: str) -> None:
    manifest = pod({"requests": G2, "limits": G2}, annotation(G2, G2))
    got = decode(request(manifest, driver=driver))
    assert (got.qos, got.source) == ("Guaranteed", "resource-enforcer.dev/resources")
    assert (got.cpu_request_milli, got.cpu_limit_milli) == (2000, 2000)
    assert (got.memory_request, got.memory_limit) == (1 << 30, 1 << 30)
    assert got.exclusive_cpus == 2
    assert got.key == f"{UID}/app"
    assert (got.namespace, got.pod_name, got.container) == ("prod", "web", "app")


def test_annotation_keeps_the_memory_request_cri_does_not_carry() -> None:
    req, lim = {"cpu": "500m", "memory": "256Mi"}, {"cpu": "1", "memory": "1Gi"}
    got = decode(request(pod({"requests": req, "limits": lim}, annotation(req, lim))))
    assert got.qos == "Burstable"
    assert (got.cpu_request_milli, got.memory_request) == (500, 256 << 20)
    assert got.exclusive_cpus == 0


@pytest.mark.parametrize(
    ("resources", "qos", "cpu_req", "cpu_lim", "mem_lim"),
    [
        ({}, "BestEffort", 0, 0, 0),
        ({"requests": {"cpu": "100m"}}, "Burstable", 100, 0, 0),
        ({"requests": {"cpu": "250m"}, "limits": {"cpu": "1500m"}}, "Burstable", 250, 1500, 0),
        ({"limits": G2}, "Guaranteed", 2000, 2000, 1 << 30),
    ],
)
def test_estimate_from_cri_without_annotation(
    resources: dict, qos: str, cpu_req: int, cpu_lim: int, mem_lim: int
) -> None:
    got = decode(request(pod(resources)))
    assert got.source == "cri"
    assert (got.qos, got.cpu_request_milli, got.cpu_limit_milli, got.memory_limit) == (
        qos,
        cpu_req,
        cpu_lim,
        mem_lim,
    )


def test_contradicting_annotation_falls_back_to_cri_and_warns() -> None:
    # The author claims 4 whole CPUs; kubelet was told half a CPU.
    half = {"cpu": "500m", "memory": "1Gi"}
    four = {"cpu": "4", "memory": "1Gi"}
    warnings: list[str] = []
    got = decode(
        request(pod({"requests": half, "limits": half}, annotation(four, four))),
        warn=warnings.append,
    )
    assert got.source == "cri" and got.cpu_request_milli == 500 and got.exclusive_cpus == 0
    assert warnings and "prod/web" in warnings[0] and "contradicts" in warnings[0]


def test_compatible_annotations_in_order() -> None:
    res = {"requests": G2, "limits": G2}
    both = {
        **annotation(G2, G2, "intel.com/resources"),
        **annotation(G2, G2, "noderesource.dev/resources"),
    }
    assert decode(request(pod(res, both))).source == "noderesource.dev/resources"
    one = annotation(G2, G2, "intel.com/resources")
    assert decode(request(pod(res, one))).source == "intel.com/resources"


@pytest.mark.parametrize(
    "bad",
    [
        "{not json",
        json.dumps({"containers": {"app": {"requests": {"cpu": 2}}}}),
        json.dumps({"containers": {"app": {"requests": {"cpu": "two"}, "limits": {}}}}),
        json.dumps({"containers": {"other": {"requests": {}, "limits": {}}}}),
    ],
)
def test_malformed_annotation_warns_and_uses_cri(bad: str) -> None:
    warnings: list[str] = []
    got = decode(
        request(pod({"limits": G2}, {"resource-enforcer.dev/resources": bad})),
        warn=warnings.append,
    )
    assert got.source == "cri" and got.qos == "Guaranteed" and got.exclusive_cpus == 2
    assert warnings and "resource-enforcer.dev/resources" in warnings[0]


def test_classes_resolved_and_checked() -> None:
    classes = ClassSettings(
        rdt={"gold", "Burstable"},
        blockio={"slow"},
        access=ClassAccess({"rdt": {"gold": ("prod",)}}),
    )
    manifest = pod(
        {"requests": {"cpu": "100m"}},
        {
            "rdtclass.resource-enforcer.dev/pod": "gold",
            "blockio.resources.beta.kubernetes.io/container.app": "slow",
        },
    )
    got = decode(request(manifest), classes=classes)
    assert (got.rdt_class, got.blockio_class) == ("gold", "slow")
    manifest["metadata"]["namespace"] = "dev"
    with pytest.raises(DecodeError) as err:
        decode(request(manifest), classes=classes)
    assert err.value.reason == Reason.FORBIDDEN
    assert "rdtclass.resource-enforcer.dev/pod" in str(err.value) and '"dev"' in str(err.value)


@pytest.mark.parametrize(
    ("annotations", "reason"),
    [
        ({"rdtclass.resource-enforcer.dev/pod": "../../etc"}, Reason.BAD_REQUEST),
        (
            {"blockioclass.resource-enforcer.dev/container.x": "a/b"},
            Reason.BAD_REQUEST,
        ),
        ({"rdtclass.resource-enforcer.dev/pod": "platinum"}, Reason.BAD_REQUEST),
        ({"prefer-shared-cpus.resource-enforcer.dev/pod": "yes"}, Reason.BAD_REQUEST),
    ],
)
def test_refusals(annotations: dict, reason: Reason) -> None:
    with pytest.raises(DecodeError) as err:
        decode(request(pod({}, annotations)), classes=ClassSettings(rdt={"gold"}, blockio=set()))
    assert err.value.reason == reason
    assert next(iter(annotations)) in str(err.value)


def test_qos_default_class_and_preferences() -> None:
    manifest = pod(
        {"limits": G2},
        {
            "cpu.preserve.resource-enforcer.dev/container.app": "true",
            "prefer-isolated-cpus.resource-policy.nri.io/pod": "false",
        },
    )
    got = decode(request(manifest), classes=ClassSettings(rdt={"Guaranteed"}))
    assert got.rdt_class == "Guaranteed" and got.blockio_class is None
    assert got.preferences.preserve is True and got.preferences.isolated is False
    assert got.preferences.shared is None


def test_preference_the_namespace_may_not_use_is_forbidden() -> None:
    config = parse_config({"policy": {"reservedNamespaces": ["kube-system"]}})
    settings = ClassSettings(preferences=config.preference_access())
    key = "cpu.preserve.resource-enforcer.dev/container.app"
    manifest = pod({"limits": G2}, {key: "true"})  # namespace "prod"
    with pytest.raises(DecodeError) as err:
        decode(request(manifest), classes=settings)
    assert err.value.reason == Reason.FORBIDDEN
    message = str(err.value)
    assert "prod/web" in message and f'"{key}"' in message and '"prod"' in message
    assert "kube-system" in message
    # Declining asks for nothing; the same request from a reserved namespace is allowed.
    manifest["metadata"]["annotations"][key] = "false"
    assert decode(request(manifest), classes=settings).preferences.preserve is False
    manifest["metadata"]["annotations"][key] = "true"
    manifest["metadata"]["namespace"] = "kube-system"
    assert decode(request(manifest), classes=settings).preferences.preserve is True


def test_missing_container_name_is_refused() -> None:
    req = request(pod({}))
    req.config.metadata.name = ""
    with pytest.raises(DecodeError, match="name is empty"):
        decode(req)


@pytest.mark.parametrize(
    ("requests", "limits", "why"),
    [
        ({"cpu": "-64"}, {}, "negative"),
        ({"cpu": "100m", "memory": "-1Gi"}, {}, "negative"),
        ({"cpu": "2"}, {"cpu": "1"}, "CPU request above its limit"),
        ({"memory": "2Gi"}, {"memory": "1Gi"}, "memory request above its limit"),
    ],
)
def test_impossible_annotation_values_are_not_trusted(
    requests: dict, limits: dict, why: str
) -> None:
    # A namespace the webhook does not watch can carry any annotation: values the API server
    # would never admit must not reach the policy's accounting.
    warnings: list[str] = []
    got = decode(
        request(pod({}, annotation(requests, limits, "noderesource.dev/resources"))),
        warn=warnings.append,
    )
    assert got.source == "cri" and got.cpu_request_milli >= 0 and got.memory_request >= 0
    assert warnings and why in warnings[0]
