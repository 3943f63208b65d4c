"""CPUs aligned with another driver's device on the real node (issue 25, item 3): the test-only
driver `gpu.example.com` (tests/support/fake_gpu_driver.py) runs beside kubelet, registered
through kubelet's plugin folder, and publishes two fake GPUs: gpu-0 on NUMA node 0 (this
machine's only node, where CPU 1, the one CPU the enforcer's driver offers, sits) and gpu-1 on
NUMA node 1. A claim asking for a GPU and a CPU with `matchAttribute:
resource.kubernetes.io/numaNode` stays Pending when it names gpu-1 (no CPU of node 1) and lands
on node 0 when it names gpu-0: the real scheduler evaluated the constraint across both drivers,
and the Pod runs on CPU 1 (read from its cgroup)."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from enforcer.topology import CPUSet
from tests.realcluster.test_dra import (
    NS,
    allocated,
    cpus,
    node,  # noqa: F401  (the module fixture: DRA on, DeviceClass, namespace)
    place,
    slice_devices,
    wait_for,
)
from tests.support.cluster import workloads as w
from tests.support.cluster.bed import Cluster
from tests.support.cluster.layout import NODE_NAME, REPO
from tests.support.fake_gpu_driver import DRIVER as GPU

# The scheduler's alignment across drivers does not depend on the transport (test_dra.py pins
# claims in both modes): NRI mode only, as test_helm_install.py, to keep the cluster time down.
pytestmark = pytest.mark.parametrize("cluster", ["nri"], indirect=True)

CPU = "cpu.resource-enforcer.dev"
STD = "resource.kubernetes.io"


@pytest.fixture(scope="module")
def gpus(node: Cluster) -> Iterator[Cluster]:  # noqa: F811
    log = open(node.lay.root / "fake-gpu-driver.log", "ab")  # noqa: SIM115
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.support.fake_gpu_driver",
            "--kubelet-dir",
            str(node.lay.kubelet_root),
            "--node",
            NODE_NAME,
            "--kubeconfig",
            str(node.lay.kubeconfig),
            "--gpu",
            "0:pci0000:00",
            "--gpu",
            "1:pci0000:80",
        ],
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for("the fake GPUs' ResourceSlice", lambda: gpu_devices(node) == ["gpu-0", "gpu-1"])
        yield node
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
        log.close()
        node.kubectl.run("delete", "deviceclass", GPU, "--ignore-not-found")


def gpu_devices(cluster: Cluster) -> list[str]:
    items = cluster.kubectl.json("get", "resourceslices")["items"]
    return sorted(
        d["name"]
        for s in items
        if s["spec"].get("driver") == GPU and s["spec"].get("nodeName") == NODE_NAME
        for d in s["spec"].get("devices", [])
    )


def aligned_claim(name: str, gpu_index: int) -> dict[str, Any]:
    index = f'device.attributes["{GPU}"].index == {gpu_index}'
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": GPU,
                            "selectors": [{"cel": {"expression": index}}],
                        },
                    },
                    {"name": "cpu", "exactly": {"deviceClassName": CPU, "count": 1}},
                ],
                "constraints": [{"requests": ["gpu", "cpu"], "matchAttribute": f"{STD}/numaNode"}],
            }
        },
    }


def claimed_pod(name: str, claim: str) -> dict[str, Any]:
    pod = w.pod(name, NS, w.container("app", w.burstable()))
    pod["spec"]["resourceClaims"] = [{"name": "hw", "resourceClaimName": claim}]
    pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "hw"}]
    return pod


def unschedulable(cluster: Cluster, pod: str) -> str:
    p = cluster.kubectl.json("-n", NS, "get", "pod", pod)
    for cond in p["status"].get("conditions", []):
        if cond["type"] == "PodScheduled" and cond.get("reason") == "Unschedulable":
            return str(cond.get("message", ""))
    return ""


def test_a_claim_aligned_with_a_gpu_lands_on_the_gpus_numa_node(gpus: Cluster) -> None:
    kubectl = gpus.kubectl
    wait_for("the enforcer's ResourceSlice", lambda: slice_devices(gpus) == ["cpu-1"])
    # gpu-1 is on NUMA node 1, where this node has no CPU: the claim cannot be met.
    kubectl.apply(w.dump(aligned_claim("near-gpu1", 1), claimed_pod("far", "near-gpu1")))
    message = wait_for("the scheduler's verdict on far", lambda: unschedulable(gpus, "far"))
    assert "cannot allocate all claims" in message, message
    assert allocated(gpus, "near-gpu1") == []
    kubectl.run("-n", NS, "delete", "pod", "far", "--wait=true", timeout=180)
    # gpu-0 is on node 0 with CPU 1: both are allocated and the Pod runs on CPU 1.
    place(gpus, aligned_claim("near-gpu0", 0), claimed_pod("near", "near-gpu0"))
    claim = kubectl.json("-n", NS, "get", "resourceclaim", "near-gpu0")
    results = claim["status"]["allocation"]["devices"]["results"]
    assert sorted((r["driver"], r["device"]) for r in results) == [
        (CPU, "cpu-1"),
        (GPU, "gpu-0"),
    ]
    assert cpus(gpus, "near") == CPUSet.of(1)
    kubectl.run("-n", NS, "delete", "pod", "near", "--wait=true", timeout=180)
    # The Pod object goes before kubelet has unprepared its claim with both drivers: wait for
    # kubelet's own checkpoint to drop it, while both drivers still serve (the module's end
    # stops the fake GPU driver and turns the enforcer's driver off; an unprepared claim would
    # keep CPU 1 held for the modules after this one).
    wait_for(
        "kubelet to unprepare near-gpu0", lambda: not claim_checkpointed(gpus, "near-gpu0"), 180
    )


def claim_checkpointed(cluster: Cluster, name: str) -> bool:
    """The claim is in kubelet's DRA checkpoint (prepared, not yet unprepared by every driver)."""
    state = cluster.lay.kubelet_root / "dra_manager_state"
    return state.exists() and name in state.read_text()
