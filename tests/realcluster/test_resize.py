"""In-place resize (`kubectl patch --subresource resize`, GA in Kubernetes 1.35) of a
Guaranteed pod's CPUs on the real node, kubelet sending UpdateContainerResources through the
relay or NRI's UpdateContainer to the plugin: the enforcer places the container anew
(docs/enforcer.md, docs/nri.md). Under the static policy with CPU 0 reserved: 1 CPU -> 500m
moves it from its exclusive CPU to the shared pool, which widens to every CPU; 500m -> 1 CPU
makes CPU 1 exclusive to it again and narrows the other pods back to CPU 0. Truth from the
cgroups (cpuset and CFS quota), containerd's spec and the API server's pod status.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from enforcer.topology import CPUSet
from tests.support.cluster import truth
from tests.support.cluster import workloads as w
from tests.support.cluster.bed import Cluster

NS = "resize"
ALL = CPUSet.parse(Path("/sys/fs/cgroup/cpuset/cpuset.cpus").read_text())
RESERVED = CPUSet.parse("0")


def cpus(cluster: Cluster, pod: str) -> CPUSet:
    (c,) = truth.containers_of(cluster.kubectl, NS, pod)
    return CPUSet.parse(c.cpus)


def resize(cluster: Cluster, pod: str, cpu: str) -> None:
    patch = {"spec": {"containers": [{"name": "app", "resources": w.guaranteed(cpu)}]}}
    cluster.kubectl.run(
        "-n", NS, "patch", "pod", pod, "--subresource", "resize", "-p", json.dumps(patch)
    )


def resized(cluster: Cluster, pod: str, cpu: str) -> bool:
    """kubelet reports the resize done: the container's actual resources are the new ones,
    and no resize is pending or in progress."""
    p: dict[str, Any] = cluster.kubectl.json("-n", NS, "get", "pod", pod)
    conds = {c["type"] for c in p["status"].get("conditions", [])}
    if conds & {"PodResizePending", "PodResizeInProgress"}:
        return False
    (st,) = p["status"]["containerStatuses"]
    actual = st.get("resources", {})
    return bool(actual.get("limits", {}).get("cpu") == cpu == actual["requests"].get("cpu"))


@pytest.fixture(scope="module")
def node(cluster: Cluster) -> Iterator[Cluster]:
    w.configure(cluster.kubectl)
    cluster.kubectl.apply(
        w.dump(
            w.namespace(NS),
            w.pod("grows", NS, w.container("app", w.guaranteed("1"))),
            w.pod("shared", NS, w.container("app", w.burstable())),
        )
    )
    for name in ("grows", "shared"):
        w.wait_pod_running(cluster.kubectl, NS, name)
    yield cluster
    w.delete_namespace(cluster.kubectl, NS)


def test_resize_moves_a_guaranteed_pod_between_exclusive_and_shared(node: Cluster) -> None:
    assert cpus(node, "grows") == ALL - RESERVED and cpus(node, "shared") == RESERVED
    (before,) = truth.containers_of(node.kubectl, NS, "grows")

    resize(node, "grows", "500m")
    w.wait_for("kubelet to finish the resize to 500m", lambda: resized(node, "grows", "500m"))
    # Not whole CPUs any more: the static policy gives it no exclusive CPU. It runs on the
    # shared pool, which now has every CPU, the other pod's too.
    w.wait_for("the resized pod on the shared pool", lambda: cpus(node, "grows") == ALL)
    w.wait_for("the shared pool to widen", lambda: cpus(node, "shared") == ALL)
    (c,) = truth.containers_of(node.kubectl, NS, "grows")
    assert c.container_id == before.container_id  # resized in place, not restarted
    assert truth.cpu_quota(c.cgroup) == 50000  # kubelet's new limit reached the cgroup
    w.wait_for(
        "containerd's spec to carry the shared pool",
        lambda: CPUSet.parse(truth.runtime_cpus(node.lay, c.container_id)) == ALL,
        60,
    )

    resize(node, "grows", "1")
    w.wait_for("kubelet to finish the resize to 1 CPU", lambda: resized(node, "grows", "1"))
    w.wait_for("CPU 1 exclusive again", lambda: cpus(node, "grows") == ALL - RESERVED)
    w.wait_for("the shared pool to narrow", lambda: cpus(node, "shared") == RESERVED)
    (c,) = truth.containers_of(node.kubectl, NS, "grows")
    assert c.container_id == before.container_id
    assert truth.cpu_quota(c.cgroup) == 100000
    # Nothing else on the node runs on the CPU it holds (the enforcer's and webhook's pods too).
    for other in truth.node_containers(node.kubectl):
        if other.container_id != c.container_id:
            assert not CPUSet.parse(other.cpus) & (ALL - RESERVED), other
