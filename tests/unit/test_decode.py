"""Decoding CreateContainer requests as kubelet sends them (built by the kubelet emulator),
through the CRI adapter into the core's decoder."""

from __future__ import annotations

import json

import pytest

from enforcer.cri import api_pb2
from enforcer.cri.convert import container_create
from enforcer.decode import (
    ClassSettings,
    ContainerRequest,
    DecodeError,
    Machine,
    decode_container,
)
from enforcer.refusal import Reason
from enforcer.topology import CPUSet, Topology
from resource_contract.classes import ClassAccess
from resource_contract.config import parse_config
from tests.support.kubelet_sends import container_config_for, sandbox_config_for

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
        # The kernel's own folders in resctrl, whether configured or not.
        ({"rdtclass.resource-enforcer.dev/pod": "info"}, Reason.BAD_REQUEST),
        ({"rdt.resources.beta.kubernetes.io/container.app": "mon_groups"}, Reason.BAD_REQUEST),
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


# ----- bounds before work (issue 11: item 7, defects 4 and 9) --------------------------------

MACHINE = Machine(cpus=CPUSet.parse("0-1"), mems=CPUSet.of(0), memory_bytes=8 << 30)


def test_machine_of_a_topology() -> None:
    topology = Topology.synthetic(sockets=2, cores_per_node=2, threads_per_core=1)
    machine = Machine.of(topology)
    assert (machine.cpus, machine.mems) == (CPUSet.parse("0-3"), CPUSet.of(0, 1))
    assert machine.memory_bytes == 32 << 30 and machine.cpu_milli == 4000


@pytest.mark.parametrize(
    ("value", "why"),
    [
        # Refused by its exponent before any arithmetic: it used to cost 20 s of one worker.
        ("1e999990", "out of range"),
        ("9" * 65, "longer than 64 characters"),
    ],
)
def test_an_absurd_quantity_is_refused_cheaply_and_cri_is_used(value: str, why: str) -> None:
    g1 = {"cpu": "1", "memory": "1Gi"}
    warnings: list[str] = []
    got = decode(
        request(pod({"limits": g1}, annotation({"cpu": value}, {"cpu": value}))),
        machine=MACHINE,
        warn=warnings.append,
    )
    assert got.source == "cri" and got.exclusive_cpus == 1
    assert len(warnings) == 1 and "prod/web" in warnings[0]
    assert "resource-enforcer.dev/resources" in warnings[0] and why in warnings[0]


@pytest.mark.parametrize(
    "bad",
    [
        "[" * 100_000,
        '{"containers": {"app": {"requests": {"cpu": ' + "[" * 100_000 + "]" * 100_000 + "}}}}",
        '{"containers": {}}' + " " * (256 << 10),
    ],
    ids=["deep", "deep-in-a-quantity", "above-256-KiB"],
)
def test_a_deep_or_huge_annotation_warns_and_uses_cri(bad: str) -> None:
    # Issue 11, defect 9: 100,000 levels answered CreateContainer with INTERNAL.
    warnings: list[str] = []
    got = decode(
        request(pod({"limits": G2}, {"resource-enforcer.dev/resources": bad})),
        machine=MACHINE,
        warn=warnings.append,
    )
    assert got.source == "cri" and got.qos == "Guaranteed" and got.exclusive_cpus == 2
    assert len(warnings) == 1 and warnings[0].startswith(
        'pod prod/web: ignoring annotation "resource-enforcer.dev/resources": '
    )
    assert "levels deep; its format has 4" in warnings[0] or "longer than 256 KiB" in warnings[0]


@pytest.mark.parametrize(
    ("requests", "limits", "why"),
    [
        # Burstable, no memory limit: nothing in the CRI request confirms the memory request.
        ({"cpu": "100m", "memory": "1Ti"}, {}, "a memory request of 1099511627776 bytes"),
        ({"cpu": "3"}, {}, "a CPU request of 3000m, above the node's 2 CPUs"),
    ],
)
def test_requests_above_the_nodes_capacity_are_not_believed(
    requests: dict, limits: dict, why: str
) -> None:
    manifest = pod({"requests": requests, "limits": limits}, annotation(requests, limits))
    assert decode(request(manifest)).source == "resource-enforcer.dev/resources"  # no machine
    warnings: list[str] = []
    got = decode(request(manifest), machine=MACHINE, warn=warnings.append)
    assert got.source == "cri" and got.memory_request == 0
    assert len(warnings) == 1 and "prod/web container app" in warnings[0]
    assert 'annotation "resource-enforcer.dev/resources" asks for more than the node' in warnings[0]
    assert why in warnings[0]


def test_limits_above_the_nodes_capacity_are_kubelets_to_confirm() -> None:
    requests, limits = {"cpu": "1", "memory": "1Gi"}, {"cpu": "64", "memory": "1Ti"}
    manifest = pod({"requests": requests, "limits": limits}, annotation(requests, limits))
    got = decode(request(manifest), machine=MACHINE)
    assert got.source == "resource-enforcer.dev/resources"
    assert (got.cpu_limit_milli, got.memory_request) == (64000, 1 << 30)


def with_cpusets(cpus: str = "", mems: str = "") -> api_pb2.CreateContainerRequest:
    req = request(pod({"limits": G2}))
    req.config.linux.resources.cpuset_cpus = cpus
    req.config.linux.resources.cpuset_mems = mems
    return req


def test_kubelets_cpusets_are_parsed() -> None:
    got = decode(with_cpusets("1", "0"), machine=MACHINE)
    assert (got.kubelet_cpus, got.kubelet_mems) == (CPUSet.of(1), CPUSet.of(0))
    got = decode(with_cpusets())
    assert (got.kubelet_cpus, got.kubelet_mems) == (CPUSet(), CPUSet())


@pytest.mark.parametrize(
    ("cpus", "mems", "message"),
    [
        ("abc", "", "cpuset_cpus \"abc\" is not a CPU list: 'abc' is not a CPU id"),
        ("0-99999", "", 'cpuset_cpus "0-99999" is not a CPU list: 99999 is above the limit'),
        (
            "0-7",
            "",
            'cpuset_cpus "0-7" names CPUs 2-7, which this machine does not have (it has 0-1)',
        ),
        ("1", "0,3", 'cpuset_mems "0,3" names memory nodes 3, which this machine does not have'),
        ("1", "x", 'cpuset_mems "x" is not a memory node list'),
        ("1-" + "9" * 500, "", 'cpuset_cpus "1-999999999'),
    ],
)
def test_kubelets_bad_cpusets_are_refused_naming_the_field(
    cpus: str, mems: str, message: str
) -> None:
    # Issue 11, defect 9: they used to reach runc, which then failed StartContainer.
    with pytest.raises(DecodeError) as err:
        decode(with_cpusets(cpus, mems), machine=MACHINE)
    assert err.value.reason == Reason.BAD_REQUEST
    assert str(err.value).startswith("pod prod/web container app: the CRI request's ")
    assert message in str(err.value) and len(str(err.value)) < 300
