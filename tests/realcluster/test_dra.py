"""CPUs as Dynamic Resource Allocation claims on the real node (issue 25): the enforcer's DRA
driver registered with the real kubelet, its ResourceSlice read by the real scheduler, claims
allocated by it and prepared by the driver. This machine has 2 CPUs and CPU 0 is reserved, so
the node offers one device, `cpu-1`, and a 1-CPU claim is what fits.

A Pod with a claim runs on exactly the allocated CPU, its memory node pinned; no other
container shares it; a claim for more CPUs than the node offers stays Pending with the
scheduler's reason; the prepared claim survives kill -9 of the enforcer and a kubelet restart;
deleting the Pod returns the CPU to the shared pool. Truth from the cgroup files."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from enforcer.topology import CPUSet
from tests.support.cluster import truth
from tests.support.cluster import workloads as w
from tests.support.cluster.bed import Cluster
from tests.support.cluster.layout import NODE_NAME, REPO

NS = "dra"
DRIVER = "cpu.resource-enforcer.dev"
ALL = CPUSet.parse(Path("/sys/fs/cgroup/cpuset/cpuset.cpus").read_text())
RESERVED = CPUSet.parse("0")
ENFORCER = "app.kubernetes.io/name=resource-enforcer"
CONFIG = w.STATIC_CONFIG + "dra:\n  enabled: true\n  mode: individual\n"


def wait_for(what: str, check: Callable[[], object], timeout: float = 120) -> Any:
    deadline = time.monotonic() + timeout
    while not (result := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(1)
    return result


def claim(name: str, count: int) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "cpus", "exactly": {"deviceClassName": DRIVER, "count": count}}
                ]
            }
        },
    }


def claimed_pod(name: str, claim_name: str) -> dict[str, Any]:
    pod = w.pod(name, NS, w.container("app", w.burstable()))
    pod["spec"]["resourceClaims"] = [{"name": "cpus", "resourceClaimName": claim_name}]
    pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "cpus"}]
    return pod


def cpus(cluster: Cluster, pod: str) -> CPUSet:
    (c,) = truth.containers_of(cluster.kubectl, NS, pod)
    return CPUSet.parse(c.cpus)


def slice_devices(cluster: Cluster) -> list[str]:
    items = cluster.kubectl.json("get", "resourceslices")["items"]
    return sorted(
        d["name"]
        for s in items
        if s["spec"].get("driver") == DRIVER and s["spec"].get("nodeName") == NODE_NAME
        for d in s["spec"].get("devices", [])
    )


def allocated(cluster: Cluster, name: str) -> list[str]:
    c = cluster.kubectl.json("-n", NS, "get", "resourceclaim", name)
    results = c.get("status", {}).get("allocation", {}).get("devices", {}).get("results", [])
    return [r["device"] for r in results if r["driver"] == DRIVER]


def place(cluster: Cluster, *docs: dict[str, Any]) -> None:
    cluster.kubectl.apply(w.dump(*docs))
    for d in docs:
        if d["kind"] == "Pod":
            w.wait_pod_running(cluster.kubectl, NS, d["metadata"]["name"], timeout=180)


@pytest.fixture(scope="module")
def node(cluster: Cluster) -> Iterator[Cluster]:
    if len(ALL) != 2:
        pytest.fail(f"these tests are written for the 2-CPU test machine, not {ALL}")
    kubectl = cluster.kubectl
    # The control plane serves DRA as it comes (GA since 1.34, no flag in the bed).
    assert "deviceclasses" in kubectl.run("api-resources", "--api-group=resource.k8s.io").stdout
    kubectl.run("apply", "-k", str(REPO / "deploy" / "dra"))
    w.configure(kubectl, CONFIG)
    kubectl.apply(w.dump(w.namespace(NS)))
    yield cluster
    w.delete_namespace(kubectl, NS)
    w.configure(kubectl)
    kubectl.run("delete", "-k", str(REPO / "deploy" / "dra"), "--ignore-not-found")


def enforcer_restarts(cluster: Cluster) -> int:
    (pod,) = cluster.kubectl.json("-n", w.ENFORCER_NS, "get", "pods", "-l", ENFORCER)["items"]
    statuses = pod["status"].get("containerStatuses", [])
    ready = bool(statuses) and all(s.get("ready") for s in statuses)
    return sum(s.get("restartCount", 0) for s in statuses) if ready else -1


def enforcer_task_pid(cluster: Cluster) -> int:
    (pod,) = cluster.kubectl.json("-n", w.ENFORCER_NS, "get", "pods", "-l", ENFORCER)["items"]
    cid = pod["status"]["containerStatuses"][0]["containerID"].split("://", 1)[-1]
    out = subprocess.run(
        [
            str(cluster.bins["containerd"] / "ctr"),
            f"--address={cluster.lay.runtime_socket}",
            "--namespace=k8s.io",
            "tasks",
            "ls",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    for line in out.splitlines():
        fields = line.split()
        if fields and fields[0] == cid:
            pid = int(fields[1])
            if cluster.mode == "nri":
                return pid
            # Relay mode runs `run --supervise`: the enforcer is the supervisor's child, which
            # the supervisor starts again (killing the supervisor would take the relay, and
            # with it kubelet's way to the runtime, away for good).
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            return int(children[0]) if children else 0  # 0: being started again
    raise AssertionError(f"no task of the enforcer's container {cid}: {out}")


def test_a_claimed_cpu_is_the_pods_alone_through_crashes_and_back_to_the_pool(
    node: Cluster,
) -> None:
    kubectl = node.kubectl
    # The driver publishes the node's one allocatable CPU (CPU 0 is reserved).
    wait_for("the driver's ResourceSlice", lambda: slice_devices(node) == ["cpu-1"])
    place(node, w.pod("shared", NS, w.container("app", w.burstable())))
    assert cpus(node, "shared") == ALL
    place(node, claim("one-cpu", 1), claimed_pod("claimed", "one-cpu"))
    assert allocated(node, "one-cpu") == ["cpu-1"]
    (c,) = truth.containers_of(kubectl, NS, "claimed")
    assert (CPUSet.parse(c.cpus), c.mems) == (CPUSet.of(1), "0")
    # Nobody else runs on it: the shared pod moved off, a new pod starts off it.
    wait_for("the shared pod off the claimed CPU", lambda: cpus(node, "shared") == RESERVED)
    place(node, w.pod("later", NS, w.container("app", w.burstable())))
    assert cpus(node, "later") == RESERVED

    # More CPUs than the node offers: pending, with the scheduler's reason.
    kubectl.apply(w.dump(claim("too-many", 2), claimed_pod("greedy", "too-many")))

    def unschedulable() -> str:
        p = kubectl.json("-n", NS, "get", "pod", "greedy")
        for cond in p["status"].get("conditions", []):
            if cond["type"] == "PodScheduled" and cond.get("reason") == "Unschedulable":
                return str(cond.get("message", ""))
        return ""

    message = wait_for("the scheduler's verdict on greedy", unschedulable)
    assert "cannot allocate all claims" in message, message
    assert allocated(node, "too-many") == []

    # kill -9 of the enforcer: kubelet starts it again; the claim stays held. (A pod made
    # while no plugin runs starts unpinned, NRI being fail-open, and is re-pinned once the
    # plugin is back: so the new enforcer is waited for, and the final cpuset read.)
    restarts, victim = enforcer_restarts(node), enforcer_task_pid(node)
    assert victim > 0
    os.kill(victim, signal.SIGKILL)
    if node.mode == "nri":  # kubelet restarts the container
        wait_for("the enforcer started again", lambda: enforcer_restarts(node) > restarts, 180)
        node.wait_programs()
    else:  # the supervisor restarts its child, which serves the relay socket again
        wait_for("a new enforcer child", lambda: enforcer_task_pid(node) not in (0, victim), 180)
        wait_for("the relay serving", node.relay_serving, 120)
        wait_for("the node Ready", node.node_ready, 180)
    assert cpus(node, "claimed") == CPUSet.of(1)
    place(node, w.pod("after-kill", NS, w.container("app", w.burstable())))
    wait_for("after-kill off the claimed CPU", lambda: cpus(node, "after-kill") == RESERVED)
    assert cpus(node, "claimed") == CPUSet.of(1)
    assert slice_devices(node) == ["cpu-1"]
    # A kubelet restart: the prepared claim and its pinning stay.
    node.restart_kubelet()
    node.wait_node_ready(180)
    node.wait_programs()
    w.wait_pod_running(kubectl, NS, "claimed")
    assert cpus(node, "claimed") == CPUSet.of(1)
    place(node, w.pod("after-kubelet", NS, w.container("app", w.burstable())))
    wait_for("after-kubelet off the claimed CPU", lambda: cpus(node, "after-kubelet") == RESERVED)
    assert cpus(node, "claimed") == CPUSet.of(1)

    # The Pod goes: kubelet unprepares the claim, the CPU is the shared pool's again.
    kubectl.run("-n", NS, "delete", "pod", "claimed", "greedy", "--wait=true", timeout=180)
    wait_for("the shared pool to widen", lambda: cpus(node, "shared") == ALL, 180)
    assert cpus(node, "later") == ALL
