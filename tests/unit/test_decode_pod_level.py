"""The enforcer's decoder on pods with pod-level resources (`spec.resources`).

Each pod goes as in a cluster: the webhook's annotation (the contract's code), the CRI request
kubelet sends for it (the kubelet emulator: the cgroup parent of its QoS class, a container
without limits given the pod's), through the CRI adapter into `decode_container`. The QoS class
must be Kubernetes' (tests/unit/test_pod_level_qos.py holds the table), no container of such a
pod gets exclusive CPUs (kubelet's static policy), and the pod's CPU request is counted once.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from enforcer.cri import api_pb2
from enforcer.cri.convert import container_create
from enforcer.decode import ContainerRequest, decode_container
from enforcer.policy import make_policy
from enforcer.topology import CPUSet, Topology
from resource_contract.keys import RESOURCES_KEY
from resource_contract.pod_annotation import Policy, build_annotation
from resource_contract.policy_config import PolicyConfig
from resource_contract.qos import qos_class
from tests.support.kubelet_sends import container_config_for, sandbox_config_for
from tests.unit.test_pod_level_qos import TABLE, spec_of

UID = "0b5c9c5e-2222-4a4a-9c9c-123456789abc"


def admitted(spec: dict[str, Any], annotate: bool = True) -> dict[str, Any]:
    manifest = {"metadata": {"name": "web", "namespace": "prod", "annotations": {}}, "spec": spec}
    for c in [*spec.get("initContainers", []), *spec["containers"]]:
        c.setdefault("image", "busybox")
    if annotate:
        value = build_annotation(manifest, namespace="prod", policy=Policy.from_config(None))
        manifest["metadata"]["annotations"][RESOURCES_KEY] = value
    return manifest


def decode_all(
    manifest: dict[str, Any], warnings: list[str] | None = None
) -> list[ContainerRequest]:
    spec = manifest["spec"]
    out = []
    for c in [*spec.get("initContainers", []), *spec["containers"]]:
        req = api_pb2.CreateContainerRequest(
            pod_sandbox_id="sandbox",
            config=container_config_for(manifest, c, UID, memory_capacity=8 << 30),
            sandbox_config=sandbox_config_for(manifest, UID),
        )
        warn = (warnings if warnings is not None else []).append
        out.append(decode_container(container_create(req), warn=warn))
    return out


@pytest.mark.parametrize(
    ("resources", "containers", "init", "qos"), [t[1:] for t in TABLE], ids=[t[0] for t in TABLE]
)
def test_the_decoder_takes_the_pod_level_budget_from_the_annotation(
    resources: dict | None, containers: list, init: list, qos: str
) -> None:
    manifest = admitted(json.loads(json.dumps(spec_of(resources, containers, init))))
    warnings: list[str] = []
    decoded = decode_all(manifest, warnings)
    assert warnings == []  # the annotation agrees with kubelet's values
    pod_level = bool(
        resources
        and any(
            k in ("cpu", "memory") or k.startswith("hugepages-")
            for part in ("requests", "limits")
            for k in resources.get(part) or {}
        )
    )
    for got in decoded:
        assert got.qos == qos == qos_class(manifest["spec"])
        assert got.source == RESOURCES_KEY
        assert got.pod_level == pod_level
        if pod_level:
            assert got.exclusive_cpus == 0


def test_a_guaranteed_pod_level_budget_is_shared_and_counted_once() -> None:
    budget = {"cpu": "2", "memory": "1Gi"}
    spec = {
        "resources": {"requests": budget, "limits": budget},
        "containers": [
            {"name": "a"},
            {"name": "b"},
            {"name": "c", "resources": {"requests": {"cpu": "500m"}}},
        ],
    }
    decoded = decode_all(admitted(spec))
    assert [d.qos for d in decoded] == ["Guaranteed"] * 3
    assert [d.exclusive_cpus for d in decoded] == [0, 0, 0]
    # kubelet's values: a container without limits gets the pod's (CPU request = the limit).
    assert [d.cpu_limit_milli for d in decoded] == [2000, 2000, 2000]
    assert [d.cpu_request_milli for d in decoded] == [2000, 2000, 500]
    assert [d.memory_limit for d in decoded] == [1 << 30] * 3
    # Counted once: 750m + 750m + the 500m it asked for = the pod's 2 CPUs.
    assert [d.shared_milli for d in decoded] == [750, 750, 500]


def test_without_the_annotation_the_cri_values_still_decode() -> None:
    """The CRI fallback: no annotation, so the pod's budget is unknown; each container is
    decoded from kubelet's values (the pod's limits) and its cgroup parent, as before."""
    budget = {"cpu": "2", "memory": "1Gi"}
    spec = {"resources": {"requests": budget, "limits": budget}, "containers": [{"name": "a"}]}
    (got,) = decode_all(admitted(spec, annotate=False))
    assert (got.qos, got.source, got.pod_level) == ("Guaranteed", "cri", False)
    assert (got.cpu_request_milli, got.cpu_limit_milli, got.memory_limit) == (2000, 2000, 1 << 30)


def test_a_pod_key_that_contradicts_kubelet_is_not_trusted() -> None:
    """A pod key claiming a 4-CPU budget where kubelet gave the container a 1-CPU limit."""
    spec = {"resources": {"limits": {"cpu": "1", "memory": "1Gi"}}, "containers": [{"name": "a"}]}
    manifest = admitted(spec)
    forged = json.loads(manifest["metadata"]["annotations"][RESOURCES_KEY])
    forged["pod"] = {"requests": {}, "limits": {"cpu": "4", "memory": "1Gi"}}
    manifest["metadata"]["annotations"][RESOURCES_KEY] = json.dumps(forged)
    warnings: list[str] = []
    (got,) = decode_all(manifest, warnings)
    assert got.source == "cri" and not got.pod_level
    assert any("contradicts the CRI request" in w and "cpu_quota" in w for w in warnings)


@pytest.mark.parametrize("policy", ["static", "topology-aware", "balloons"])
def test_every_policy_places_a_pod_level_guaranteed_pod_on_shared_cpus(policy: str) -> None:
    topology = Topology.synthetic(sockets=1, cores_per_node=6, threads_per_core=1)
    placer = make_policy(
        topology, PolicyConfig.model_validate({"name": policy, "reservedCPUs": "0"})
    )
    budget = {"cpu": "2", "memory": "1Gi"}
    spec = {
        "resources": {"requests": budget, "limits": budget},
        "containers": [{"name": "a"}, {"name": "b"}],
    }
    for request in decode_all(admitted(spec)):
        placement = placer.admit(request)
        assert placement.exclusive == CPUSet()
    # A Guaranteed pod without pod-level resources still gets CPUs of its own beside it.
    plain = {"containers": [{"name": "x", "resources": {"requests": budget, "limits": budget}}]}
    (request,) = decode_all(admitted(plain))
    if policy != "balloons":
        assert len(placer.admit(request).exclusive) == 2


def test_without_the_annotation_a_borrowed_pod_limit_is_recognised() -> None:
    """A Burstable pod-level budget (1 CPU requested, 8 allowed) on a 4-CPU node: kubelet gives
    each bare container the pod's 8-CPU limit as its CPU request. A container's request above
    its pod's (LinuxPodSandboxConfig.resources) can only be that, so even without the
    annotation it gets no exclusive CPUs and counts for at most the pod's request (with the
    annotation, for its share of it): the topology-aware policy places it instead of refusing
    8 CPUs of shared CPU."""
    spec = {
        "resources": {"requests": {"cpu": "1", "memory": "64Mi"}, "limits": {"cpu": "8"}},
        "containers": [{"name": "a"}, {"name": "b"}],
    }
    topology = Topology.synthetic(sockets=1, cores_per_node=4, threads_per_core=1)
    for annotate in (False, True):
        warnings: list[str] = []
        decoded = decode_all(admitted(json.loads(json.dumps(spec)), annotate=annotate), warnings)
        assert warnings == []
        placer = make_policy(
            topology, PolicyConfig.model_validate({"name": "topology-aware", "reservedCPUs": "0"})
        )
        for got in decoded:
            assert (got.qos, got.pod_level, got.exclusive_cpus) == ("Burstable", True, 0)
            assert got.cpu_request_milli == 8000  # kubelet's shares, as they are
            assert got.shared_milli == (500 if annotate else 1000)
            assert placer.admit(got).exclusive == CPUSet()
        assert {d.source for d in decoded} == {RESOURCES_KEY if annotate else "cri"}


def test_a_one_container_pod_is_not_taken_for_a_borrowed_budget() -> None:
    """Without pod-level resources a container's request never exceeds its pod's: the
    sandbox's resources change nothing (a Guaranteed container keeps its exclusive CPUs)."""
    from enforcer.decode.kubelet import sandbox_resources_for

    g2 = {"cpu": "2", "memory": "1Gi"}
    spec = {
        "containers": [{"name": "a", "image": "b", "resources": {"requests": g2, "limits": g2}}]
    }
    manifest = admitted(spec, annotate=False)
    req = api_pb2.CreateContainerRequest(
        pod_sandbox_id="sandbox",
        config=container_config_for(manifest, spec["containers"][0], UID, memory_capacity=8 << 30),
        sandbox_config=sandbox_config_for(manifest, UID),
    )
    pod_res = sandbox_resources_for(spec)
    req.sandbox_config.linux.resources.cpu_shares = pod_res.cpu_shares
    req.sandbox_config.linux.resources.cpu_quota = pod_res.cpu_quota
    got = decode_container(container_create(req))
    assert (got.qos, got.pod_level, got.exclusive_cpus) == ("Guaranteed", False, 2)


@st.composite
def budget_pods(draw: st.DrawFn) -> dict[str, Any]:
    """Valid pods with pod-level requests (and limits or not) and app containers, some bare,
    some with requests that together stay within the pod's (as validation requires)."""
    cpu = draw(st.integers(1, 8))
    spec: dict[str, Any] = {"resources": {"requests": {"cpu": str(cpu), "memory": "1Gi"}}}
    if draw(st.booleans()):
        limit = cpu + draw(st.integers(0, 4))
        spec["resources"]["limits"] = {"cpu": str(limit), "memory": "1Gi"}
    left = cpu * 1000
    containers = []
    for i in range(draw(st.integers(1, 4))):
        asked = draw(st.integers(0, left // 2)) if left >= 200 and draw(st.booleans()) else 0
        c: dict[str, Any] = {"name": f"c{i}"}
        if asked:
            c["resources"] = {"requests": {"cpu": f"{asked}m"}}
            left -= asked
        containers.append(c)
    spec["containers"] = containers
    return spec


@settings(max_examples=150, deadline=None)
@given(budget_pods())
def test_a_pod_level_budget_is_never_exclusive_and_counted_once(spec: dict[str, Any]) -> None:
    warnings: list[str] = []
    decoded = decode_all(admitted(spec), warnings)
    assert warnings == []  # the annotation agrees with what kubelet sends
    assert all(d.pod_level and d.exclusive_cpus == 0 for d in decoded)
    pod_request = int(spec["resources"]["requests"]["cpu"]) * 1000
    total = sum(d.shared_milli for d in decoded)
    bare = [c for c in spec["containers"] if "resources" not in c]
    if bare:  # the bare containers share what the others leave: the pod is counted once
        assert pod_request <= total < pod_request + len(bare)
    else:
        assert total <= pod_request
