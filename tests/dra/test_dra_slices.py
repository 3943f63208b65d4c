"""Publishing the node's ResourceSlices through the `kubernetes` client against the test API
server (tests/support/fake_apiserver.py, serving resource.k8s.io/v1 resourceslices through a
stand-in definition with an open schema; the real API server's validation of the devices is
the real cluster's test, tests/realcluster/test_dra.py): created owned by the Node, written
only when the devices change, a new generation each time, extra slices deleted, and a slice
deleted behind the driver's back made again at the next resync."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from enforcer.cluster.client import make_api_client
from enforcer.dra.devices import build_devices
from enforcer.dra.slices import RESYNC_SECONDS, ClusterDRA
from enforcer.topology import CPUSet, Topology
from tests.support.fake_apiserver import FakeAPIServer

DRIVER = "cpu.resource-enforcer.dev"
NAME0 = f"node-a-{DRIVER}-0"
OPEN = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
SLICES = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "resourceslices.resource.k8s.io"},
    "spec": {
        "group": "resource.k8s.io",
        "scope": "Cluster",
        "names": {"plural": "resourceslices", "singular": "resourceslice", "kind": "ResourceSlice"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": OPEN}}},
            }
        ],
    },
}
BIG = Topology.synthetic(sockets=2, cores_per_node=80, threads_per_core=2)  # 320 CPUs


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[FakeAPIServer, ClusterDRA]]:
    with FakeAPIServer() as server:
        server.install_crd(SLICES)
        server.put_node("node-a")
        kubeconfig = server.kubeconfig(tmp_path / "kubeconfig")
        yield server, ClusterDRA(lambda: make_api_client(kubeconfig), "node-a")


def devices(cpus: str) -> list[dict[str, Any]]:
    return build_devices(BIG, CPUSet.parse(cpus), "individual")


def stored(server: FakeAPIServer) -> dict[str, dict[str, Any]]:
    return {name: obj for name, obj in server.custom[("resource.k8s.io", "resourceslices")].items()}


def test_slices_follow_the_devices(api: tuple[FakeAPIServer, ClusterDRA]) -> None:
    server, cluster = api
    assert cluster.publish(devices("1-3"), now=0.0)
    (first,) = stored(server).values()
    assert first["metadata"]["name"] == NAME0
    assert first["spec"]["pool"] == {"name": "node-a", "generation": 1, "resourceSliceCount": 1}
    assert [d["name"] for d in first["spec"]["devices"]] == ["cpu-1", "cpu-2", "cpu-3"]
    (owner,) = first["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"]) == ("Node", "node-a")
    assert owner["uid"] == server.nodes["node-a"]["metadata"]["uid"]
    writes = len(server.custom_writes)
    assert not cluster.publish(devices("1-3"), now=1.0)  # unchanged: nothing sent
    assert len(server.custom_writes) == writes
    # 300 CPUs: three slices of one new generation; then back to one, the others deleted.
    assert cluster.publish(devices("1-300"), now=2.0)
    pools = {o["spec"]["pool"]["generation"] for o in stored(server).values()}
    assert len(stored(server)) == 3 and pools == {2}
    assert cluster.publish(devices("5"), now=3.0)
    (only,) = stored(server).values()
    assert only["spec"]["pool"]["generation"] == 3 and only["spec"]["devices"][0]["name"] == "cpu-5"


def test_a_slice_deleted_behind_the_drivers_back_comes_back(
    api: tuple[FakeAPIServer, ClusterDRA],
) -> None:
    server, cluster = api
    assert cluster.publish(devices("1"), now=0.0)
    served = server.crds[("resource.k8s.io", "v1", "resourceslices")]
    server.delete_custom(served, NAME0)
    assert not cluster.publish(devices("1"), now=1.0)  # not checked again yet
    assert stored(server) == {}
    assert cluster.publish(devices("1"), now=1.0 + RESYNC_SECONDS)
    assert list(stored(server)) == [NAME0]
    # In place and unchanged: a resync finds it so and writes nothing.
    writes = len(server.custom_writes)
    assert not cluster.publish(devices("1"), now=2.0 + 2 * RESYNC_SECONDS)
    assert len(server.custom_writes) == writes
