"""QoS classes from pod specs (the API server's rules) and from kubelet's cgroup parents."""

import pytest

from resource_contract.qos import qos_class, qos_from_cgroup_parent


def _c(requests: dict | None = None, limits: dict | None = None) -> dict:
    return {"name": "c", "resources": {"requests": requests or {}, "limits": limits or {}}}


G = {"cpu": "1", "memory": "1Gi"}


@pytest.mark.parametrize(
    ("spec", "qos"),
    [
        ({"containers": [_c()]}, "BestEffort"),
        ({"containers": [{"name": "c"}]}, "BestEffort"),
        ({"containers": [_c(limits=G)]}, "Guaranteed"),  # requests default to limits
        ({"containers": [_c(G, G)]}, "Guaranteed"),
        ({"containers": [_c({"cpu": "1000m", "memory": "1024Mi"}, G)]}, "Guaranteed"),
        ({"containers": [_c({"cpu": "500m", "memory": "1Gi"}, G)]}, "Burstable"),
        ({"containers": [_c(limits={"cpu": "1"})]}, "Burstable"),
        ({"containers": [_c(G, G), _c()]}, "Burstable"),
        ({"containers": [_c(G, G)], "initContainers": [_c({"cpu": "100m"})]}, "Burstable"),
        ({"containers": [_c({"ephemeral-storage": "1Gi"})]}, "BestEffort"),
    ],
)
def test_qos_class(spec: dict, qos: str) -> None:
    assert qos_class(spec) == qos


@pytest.mark.parametrize(
    ("parent", "qos"),
    [
        ("/kubepods/pod1234", "Guaranteed"),
        ("/kubepods/burstable/pod1234", "Burstable"),
        ("/kubepods/besteffort/pod1234", "BestEffort"),
        ("kubepods-pod12_34.slice", "Guaranteed"),
        ("kubepods-burstable-pod12_34.slice", "Burstable"),
        ("kubepods-besteffort-pod12_34.slice", "BestEffort"),
        ("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice", "Burstable"),
        ("/system.slice", None),
        ("", None),
    ],
)
def test_qos_from_cgroup_parent(parent: str, qos: str | None) -> None:
    assert qos_from_cgroup_parent(parent) == qos
