"""The runtime restarted and the node rebooted in simulation (tests/support/cluster/faults.py:
every process of the cluster and the enforcer killed with SIGKILL, then booted again with
kubelet's, etcd's and the enforcer's folders as they were on disk). Afterwards: every pod runs
again, the Guaranteed one on an exclusive CPU that no other container on the node runs on, the
others on the shared pool, and the node goes on placing and freeing. Truth from the cgroups of
every container on the node and from the API server.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from enforcer.topology import CPUSet
from tests.support.cluster import faults, truth
from tests.support.cluster import workloads as w
from tests.support.cluster.bed import Cluster

NS = "node-faults"
ALL = CPUSet.parse(Path("/sys/fs/cgroup/cpuset/cpuset.cpus").read_text())
RESERVED = CPUSet.parse("0")
EXCLUSIVE = ALL - RESERVED
ENFORCER = "app.kubernetes.io/name=resource-enforcer"


def cpus(cluster: Cluster, pod: str) -> CPUSet | None:
    found = truth.containers_of(cluster.kubectl, NS, pod)
    return CPUSet.parse(found[0].cpus) if len(found) == 1 else None


def container_ids(cluster: Cluster, ns: str, selector: list[str]) -> set[str]:
    pods = cluster.kubectl.json("-n", ns, "get", "pods", *selector)["items"]
    return {
        st.get("containerID", "")
        for p in pods
        for st in p["status"].get("containerStatuses", [])
        if "running" in st.get("state", {}) and st.get("ready")
    }


def place(cluster: Cluster, name: str, resources: dict[str, object] | None) -> None:
    cluster.kubectl.apply(w.dump(w.pod(name, NS, w.container("app", resources))))
    w.wait_pod_running(cluster.kubectl, NS, name)


def delete(cluster: Cluster, *names: str) -> None:
    cluster.kubectl.run("-n", NS, "delete", "pod", *names, "--wait=true", timeout=180)


def nothing_double_assigned(cluster: Cluster, holder: str) -> None:
    """The exclusive CPU is the holder's alone: no other container on the node (every
    namespace, our own programs included) has it in its cpuset."""
    held = [c for c in truth.node_containers(cluster.kubectl) if c.pod == holder]
    others = [c for c in truth.node_containers(cluster.kubectl) if c.pod != holder]
    assert len(held) == 1 and CPUSet.parse(held[0].cpus) == EXCLUSIVE, held
    assert others, "no other container found on the node"
    for c in others:
        assert not CPUSet.parse(c.cpus) & EXCLUSIVE, c


@pytest.fixture(scope="module")
def node(cluster: Cluster) -> Iterator[Cluster]:
    w.configure(cluster.kubectl)
    cluster.kubectl.apply(w.dump(w.namespace(NS)))
    place(cluster, "held", w.guaranteed("1"))
    place(cluster, "shared", w.burstable())
    yield cluster
    w.delete_namespace(cluster.kubectl, NS)


def test_runtime_restarted(node: Cluster) -> None:
    before = container_ids(node, NS, [])
    faults.restart_runtime(node)
    node.wait_node_ready(180)
    # The pods ran on through the restart, where they were.
    assert container_ids(node, NS, []) == before
    assert cpus(node, "held") == EXCLUSIVE and cpus(node, "shared") == RESERVED
    # The enforcer is back in the runtime's path: a new pod is placed by it (kubelet alone
    # would give it every CPU), and deleting the Guaranteed one widens the shared pool.
    place(node, "after-restart", w.burstable())
    w.wait_for("the new pod on the shared pool", lambda: cpus(node, "after-restart") == RESERVED)
    nothing_double_assigned(node, "held")
    delete(node, "after-restart")


def test_node_rebooted(node: Cluster) -> None:
    ours = container_ids(node, NS, [])
    programs = container_ids(node, "resource-enforcer", [])
    faults.reboot(node)
    # Every pod comes back with new containers (a boot leaves none), our programs too.
    w.wait_for(
        "the test pods running again in new containers",
        lambda: len(now := container_ids(node, NS, [])) == len(ours) and not now & ours,
        360,
    )
    w.wait_for(
        "the enforcer and webhook running again",
        lambda: (
            len(now := container_ids(node, "resource-enforcer", [])) == len(programs)
            and not now & programs
        ),
        360,
    )
    node.wait_programs()
    # The enforcer found its state on disk naming containers that are gone, and the pods'
    # new containers: nothing held twice, nothing lost.
    w.wait_for("the Guaranteed pod on its exclusive CPU", lambda: cpus(node, "held") == EXCLUSIVE)
    w.wait_for("the shared pod on the shared pool", lambda: cpus(node, "shared") == RESERVED)
    w.wait_for(
        "every other container off the exclusive CPU",
        lambda: all(
            not CPUSet.parse(c.cpus) & EXCLUSIVE
            for c in truth.node_containers(node.kubectl)
            if c.pod != "held"
        ),
    )
    nothing_double_assigned(node, "held")
    # And the node goes on: the CPU comes free and is exclusive again for the next pod.
    delete(node, "held")
    w.wait_for("the shared pool to widen", lambda: cpus(node, "shared") == ALL)
    place(node, "after-boot", w.guaranteed("1"))
    assert cpus(node, "after-boot") == EXCLUSIVE
    nothing_double_assigned(node, "after-boot")
    delete(node, "after-boot")
