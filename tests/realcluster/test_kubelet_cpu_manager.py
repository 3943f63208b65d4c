"""kubelet's own CPU manager `static` beside the enforcer: refused (docs/install.md, Step 4).

The real kubelet restarted with `cpuManagerPolicy: static` writes that policy into its
cpu_manager_state; an enforcer started then (its pod deleted, the DaemonSet makes a new one)
reads it and does not start: the pod never becomes ready and its log says why, naming the
policy, the file and what to change. In relay mode the fallback link keeps kubelet reaching
containerd meanwhile: pods still start. kubelet back on `none`, the enforcer starts, adopts the
running pods and places new ones. Truth from kubelet's own checkpoint, the pod's log and
status, and the cgroups.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from enforcer.topology import CPUSet
from tests.support.cluster import faults, truth
from tests.support.cluster import workloads as w
from tests.support.cluster.bed import Cluster

NS = "kubelet-cpu-manager"
ALL = CPUSet.parse(Path("/sys/fs/cgroup/cpuset/cpuset.cpus").read_text())
RESERVED = CPUSet.parse("0")
ENFORCER = "app.kubernetes.io/name=resource-enforcer"
REFUSAL = "kubelet's CPU manager policy is 'static'"


def cpus(cluster: Cluster, pod: str) -> CPUSet:
    (c,) = truth.containers_of(cluster.kubectl, NS, pod)
    return CPUSet.parse(c.cpus)


def enforcer_pods(cluster: Cluster) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cluster.kubectl.json(
        "-n", w.ENFORCER_NS, "get", "pods", "-l", ENFORCER
    )["items"]
    return items


def restart_enforcer(cluster: Cluster) -> None:
    cluster.kubectl.run(
        "-n", w.ENFORCER_NS, "delete", "pod", "-l", ENFORCER, "--wait=true", timeout=180
    )


def refused(cluster: Cluster) -> bool:
    """The enforcer's pod is not ready and its log (this run's or the last one's) says why."""
    pods = enforcer_pods(cluster)
    if len(pods) != 1:
        return False
    p = pods[0]
    ready = any(
        c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", [])
    )
    if ready:
        return False
    name = p["metadata"]["name"]
    for extra in ((), ("--previous",)):
        out = cluster.kubectl.run(
            "-n", w.ENFORCER_NS, "logs", name, *extra, "--tail=200", check=False
        )
        if REFUSAL in out.stdout:
            return True
    return False


@pytest.fixture(scope="module")
def node(cluster: Cluster) -> Iterator[Cluster]:
    w.configure(cluster.kubectl)
    cluster.kubectl.apply(w.dump(w.namespace(NS)))
    cluster.kubectl.apply(w.dump(w.pod("held", NS, w.container("app", w.guaranteed("1")))))
    w.wait_pod_running(cluster.kubectl, NS, "held")
    try:
        yield cluster
    finally:
        if (
            faults.checkpoint_policy(cluster) != "none"
        ):  # a failure midway: the node as the others need it
            faults.set_kubelet_cpu_manager(cluster, "none")
            restart_enforcer(cluster)
            cluster.wait_programs()
        w.delete_namespace(cluster.kubectl, NS)


def test_the_enforcer_refuses_to_run_beside_kubelets_static_policy(node: Cluster) -> None:
    assert faults.checkpoint_policy(node) == "none"
    assert cpus(node, "held") == ALL - RESERVED

    faults.set_kubelet_cpu_manager(node, "static")
    assert faults.checkpoint_policy(node) == "static"  # kubelet's own checkpoint says so
    restart_enforcer(node)
    w.wait_for("the enforcer's pod to refuse, saying why", lambda: refused(node), 180)
    # Still refusing a while later (it does not come up on a retry).
    w.wait_for("a second look", lambda: refused(node), 60)
    # The node still runs pods: kubelet reaches the runtime (in relay mode through the
    # fallback link the stopped enforcer left).
    node.kubectl.apply(w.dump(w.pod("meanwhile", NS, w.container("app", w.burstable()))))
    w.wait_pod_running(node.kubectl, NS, "meanwhile")

    faults.set_kubelet_cpu_manager(node, "none")
    assert faults.checkpoint_policy(node) == "none"
    restart_enforcer(node)  # rather than wait out the crash loop's back-off
    node.wait_programs()
    # Back in charge: the Guaranteed pod holds its CPU alone, the others share CPU 0, and a
    # freed CPU goes to the next Guaranteed pod.
    w.wait_for("the held pod on its exclusive CPU", lambda: cpus(node, "held") == ALL - RESERVED)
    w.wait_for("the pod started meanwhile on CPU 0", lambda: cpus(node, "meanwhile") == RESERVED)
    node.kubectl.run("-n", NS, "delete", "pod", "held", "--wait=true", timeout=180)
    w.wait_for("the shared pool to widen", lambda: cpus(node, "meanwhile") == ALL)
