"""DRA `grouped` mode on the real node (issue 25; test_dra.py runs `individual`): the driver
publishes one shareable device per NUMA node with the consumable capacity `cpu` (its CPUs not
reserved: CPU 1 on this 2-CPU machine, CPU 0 being reserved), the real scheduler allocates a
claim's 1 CPU of capacity from it, and the driver's topology-aware placement picks the CPU
inside the group when kubelet prepares the claim. The Pod runs on that CPU alone (read from its
cgroup), the capacity is used up for a second claim (pending with the scheduler's reason), and
deleting the Pod returns the CPU to the shared pool."""

from __future__ import annotations

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

NS = "dra-grouped"
DRIVER = "cpu.resource-enforcer.dev"
ALL = CPUSet.parse(Path("/sys/fs/cgroup/cpuset/cpuset.cpus").read_text())
RESERVED = CPUSet.of(0)
CONFIG = w.STATIC_CONFIG + "dra:\n  enabled: true\n  mode: grouped\n"


def wait_for(what: str, check: Callable[[], Any], timeout: float = 120) -> Any:
    """Polls `check` every second until it returns something true, and returns it."""
    deadline = time.monotonic() + timeout
    while not (result := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(1)
    return result


def claim(name: str, cpus: str) -> dict[str, Any]:
    """A claim for `cpus` CPUs of capacity of one NUMA node's device (the capacity's name as
    the device publishes it: `cpu`, in the driver's domain)."""
    request = {"deviceClassName": DRIVER, "capacity": {"requests": {"cpu": cpus}}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"devices": {"requests": [{"name": "cpus", "exactly": request}]}},
    }


def claimed_pod(name: str, claim_name: str) -> dict[str, Any]:
    pod = w.pod(name, NS, w.container("app", w.burstable()))
    pod["spec"]["resourceClaims"] = [{"name": "cpus", "resourceClaimName": claim_name}]
    pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "cpus"}]
    return pod


def cpus(cluster: Cluster, pod: str) -> CPUSet:
    (c,) = truth.containers_of(cluster.kubectl, NS, pod)
    return CPUSet.parse(c.cpus)


def published(cluster: Cluster) -> list[dict[str, Any]]:
    items = cluster.kubectl.json("get", "resourceslices")["items"]
    return [
        d
        for s in items
        if s["spec"].get("driver") == DRIVER and s["spec"].get("nodeName") == NODE_NAME
        for d in s["spec"].get("devices", [])
    ]


def allocation(cluster: Cluster, name: str) -> list[dict[str, Any]]:
    c = cluster.kubectl.json("-n", NS, "get", "resourceclaim", name)
    results = c.get("status", {}).get("allocation", {}).get("devices", {}).get("results", [])
    return [r for r in results if r["driver"] == DRIVER]


def unschedulable(cluster: Cluster, pod: str) -> str:
    p = cluster.kubectl.json("-n", NS, "get", "pod", pod)
    for cond in p["status"].get("conditions", []):
        if cond["type"] == "PodScheduled" and cond.get("reason") == "Unschedulable":
            return str(cond.get("message", ""))
    return ""


def claim_checkpointed(cluster: Cluster, name: str) -> bool:
    """The claim is in kubelet's DRA checkpoint (prepared, not yet unprepared)."""
    state = cluster.lay.kubelet_root / "dra_manager_state"
    return state.exists() and name in state.read_text()


@pytest.fixture(scope="module")
def grouped(cluster: Cluster) -> Iterator[Cluster]:
    if len(ALL) != 2:
        pytest.fail(f"these tests are written for the 2-CPU test machine, not {ALL}")
    kubectl = cluster.kubectl
    kubectl.run("apply", "-k", str(REPO / "deploy" / "dra"))
    w.configure(kubectl, CONFIG)
    kubectl.apply(w.dump(w.namespace(NS)))
    try:
        yield cluster
    finally:
        w.delete_namespace(kubectl, NS)
        w.configure(kubectl)
        kubectl.run("delete", "-k", str(REPO / "deploy" / "dra"), "--ignore-not-found")


def test_a_grouped_claim_runs_on_one_cpu_of_its_group_alone(grouped: Cluster) -> None:
    kubectl = grouped.kubectl

    def one_group() -> list[dict[str, Any]]:
        devices = published(grouped)
        return devices if [d["name"] for d in devices] == ["numa-0"] else []

    (device,) = wait_for("the driver's grouped ResourceSlice", one_group, 120)
    assert device["allowMultipleAllocations"] is True
    assert device["capacity"]["cpu"]["value"] == "1"  # CPU 1: the node's CPUs but the reserved

    kubectl.apply(w.dump(w.pod("shared", NS, w.container("app", w.burstable()))))
    w.wait_pod_running(kubectl, NS, "shared")
    assert cpus(grouped, "shared") == ALL
    kubectl.apply(w.dump(claim("one-cpu", "1"), claimed_pod("claimed", "one-cpu")))
    w.wait_pod_running(kubectl, NS, "claimed", timeout=180)
    (result,) = allocation(grouped, "one-cpu")
    assert result["device"] == "numa-0"
    assert result.get("consumedCapacity") == {"cpu": "1"}
    (c,) = truth.containers_of(kubectl, NS, "claimed")
    assert (CPUSet.parse(c.cpus), c.mems) == (CPUSet.of(1), "0")
    # No other pod shares it: the shared pod moved off, a new one starts off it.
    wait_for("the shared pod off the claimed CPU", lambda: cpus(grouped, "shared") == RESERVED)
    kubectl.apply(w.dump(w.pod("later", NS, w.container("app", w.burstable()))))
    w.wait_pod_running(kubectl, NS, "later")
    assert cpus(grouped, "later") == RESERVED
    # The group's capacity is used up: a second claim stays pending, with the reason.
    kubectl.apply(w.dump(claim("second", "1"), claimed_pod("second", "second")))
    wait_for(
        "the scheduler's verdict on the second claim", lambda: unschedulable(grouped, "second")
    )
    assert "cannot allocate all claims" in unschedulable(grouped, "second")
    kubectl.run("-n", NS, "delete", "pod", "second", "--wait=true", timeout=180)

    # Released at delete: the CPU goes back to the shared pool.
    kubectl.run("-n", NS, "delete", "pod", "claimed", "--wait=true", timeout=180)
    wait_for("kubelet to unprepare one-cpu", lambda: not claim_checkpointed(grouped, "one-cpu"))
    wait_for("the shared pool to widen", lambda: cpus(grouped, "shared") == ALL, 180)
    assert cpus(grouped, "later") == ALL
