"""Restarts on the real node: kubelet restarted (a node's kubelet upgrade or crash), the
enforcer's pod deleted and started again by its DaemonSet. Running pods keep their CPUs, and
the node goes on placing new pods; truth from the cgroups."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from enforcer.topology import CPUSet
from tests.support.cluster import truth
from tests.support.cluster import workloads as w
from tests.support.cluster.bed import Cluster

NS = "restarts"
ALL = CPUSet.parse(Path("/sys/fs/cgroup/cpuset/cpuset.cpus").read_text())
RESERVED = CPUSet.parse("0")
ENFORCER = "app.kubernetes.io/name=resource-enforcer"


def wait_for(what: str, check: Callable[[], object], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(1)


def cpus(cluster: Cluster, pod: str) -> CPUSet:
    (c,) = truth.containers_of(cluster.kubectl, NS, pod)
    return CPUSet.parse(c.cpus)


def place(cluster: Cluster, name: str, resources: dict[str, object] | None) -> None:
    cluster.kubectl.apply(w.dump(w.pod(name, NS, w.container("app", resources))))
    w.wait_pod_running(cluster.kubectl, NS, name)


def delete(cluster: Cluster, *names: str) -> None:
    cluster.kubectl.run("-n", NS, "delete", "pod", *names, "--wait=true", timeout=180)


@pytest.fixture(scope="module")
def node(cluster: Cluster) -> Iterator[Cluster]:
    w.configure(cluster.kubectl)
    cluster.kubectl.apply(w.dump(w.namespace(NS)))
    place(cluster, "shared", w.burstable())
    yield cluster
    w.delete_namespace(cluster.kubectl, NS)


def test_kubelet_restarted(node: Cluster) -> None:
    place(node, "before", w.guaranteed("1"))
    assert cpus(node, "before") == ALL - RESERVED
    node.restart_kubelet()
    node.wait_node_ready(180)
    # kubelet found its pod running and left it where the enforcer put it.
    w.wait_pod_running(node.kubectl, NS, "before")
    assert cpus(node, "before") == ALL - RESERVED
    assert cpus(node, "shared") == RESERVED
    delete(node, "before")
    wait_for("the shared pool to widen", lambda: cpus(node, "shared") == ALL)
    place(node, "after", w.guaranteed("1"))
    assert cpus(node, "after") == ALL - RESERVED
    delete(node, "after")


def enforcer_pod(node: Cluster) -> dict[str, object] | None:
    items = node.kubectl.json("-n", w.ENFORCER_NS, "get", "pods", "-l", ENFORCER)["items"]
    return items[0] if len(items) == 1 else None


def test_enforcer_restarted(node: Cluster) -> None:
    place(node, "held", w.guaranteed("1"))
    old = enforcer_pod(node)
    assert old is not None
    node.kubectl.run(
        "-n", w.ENFORCER_NS, "delete", "pod", "-l", ENFORCER, "--wait=true", timeout=180
    )
    node.wait_programs()
    new = enforcer_pod(node)
    assert new is not None and new["metadata"]["uid"] != old["metadata"]["uid"]  # type: ignore[index]
    if node.mode == "relay":
        # The relay's socket came back in place of the fallback link, and the reconnect
        # service moved kubelet onto it (docs/install.md, Step 3).
        assert node.relay_serving() and node.kubelet_on_relay()
    # The new enforcer adopted the running pod: its CPU stays exclusive, and is handed back to
    # the shared pool when it goes.
    assert cpus(node, "held") == ALL - RESERVED
    wait_for("the shared pod back on the shared pool", lambda: cpus(node, "shared") == RESERVED)
    delete(node, "held")
    wait_for("the shared pool to widen", lambda: cpus(node, "shared") == ALL)
    place(node, "next", w.guaranteed("1"))
    assert cpus(node, "next") == ALL - RESERVED
    delete(node, "next")
