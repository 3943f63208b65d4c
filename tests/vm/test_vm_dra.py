"""DRA's done-when on a node with 2 NUMA nodes (issue 25): a real kubelet in the cgroup v2 VM
(tests.support.vmnode: the control plane on the host, kubelet, containerd 2.4 and our enforcer
as an NRI plugin with ``dra.enabled`` in the VM of 2 sockets x 1 core x 2 threads, CPUs 0-1 on
NUMA node 0 and 2-3 on node 1, CPU 0 reserved).

A Pod with a ResourceClaim for 2 CPUs of NUMA node 1 (a CEL selector on
``resource.kubernetes.io/numaNode``) runs on exactly the CPUs the scheduler allocated, read from
its cgroup v2 ``cpuset.cpus.effective`` in the VM, with its memory on that node
(``cpuset.mems.effective``); a shared pod's cpuset leaves them out while the claim is held (and
a pod started then starts without them) and gets them back when the claimed Pod is deleted.
Truth from the VM's cgroup files."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from enforcer.topology import CPUSet
from tests.support.cluster import workloads as w
from tests.support.cluster.layout import REPO
from tests.support.slow import scaled
from tests.support.vm import say
from tests.support.vm_background import Background, VMBackgroundError
from tests.support.vmnode import VMNode

pytestmark = pytest.mark.vm

NS = "dra-vm"
DRIVER = "cpu.resource-enforcer.dev"
NODE1 = CPUSet.parse("2-3")
ALL = CPUSet.parse("0-3")


def wait_for(what: str, check: Callable[[], Any], timeout: float = 120) -> Any:
    deadline = time.monotonic() + scaled(timeout)
    while not (result := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(2)
    return result


@pytest.fixture(scope="module")
def node(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[VMNode]:
    """The node made in the session's VM once the in-VM subset has run there (one boot per
    session: tests.support.vm_background), or the one left up in ``$KRE_VM_NODE`` (``python -m
    tests.support.vmnode up DIR``), which stays up."""
    given = os.environ.get("KRE_VM_NODE")
    if given:
        vmnode = VMNode.attach(Path(given))
    else:
        background: Background = request.getfixturevalue("background")
        try:
            vm = background.wait_finished()
        except VMBackgroundError as e:
            pytest.fail(f"the cgroup v2 VM is needed: {e}", pytrace=False)
        if background.outcome.bins_error:
            pytest.fail(background.outcome.bins_error, pytrace=False)
        vmnode = VMNode(Path(tmp_path_factory.mktemp("vm-node")), vm)
        try:
            vmnode.up()
        except Exception as e:
            pytest.fail(f"the VM node is needed: {e}", pytrace=False)
    try:
        vmnode.kubectl.run("apply", "-k", str(REPO / "deploy" / "dra"))
        vmnode.kubectl.apply(w.dump(w.namespace(NS)))
        yield vmnode
        w.delete_namespace(vmnode.kubectl, NS)
    finally:
        say(f"tests/vm: the VM node's steps (s): {vmnode.timings}")
        if not given:
            vmnode.down()


def numa_claim(name: str, count: int, numa: int) -> dict[str, Any]:
    selector = f'device.attributes["resource.kubernetes.io"].numaNode == {numa}'
    request = {
        "deviceClassName": DRIVER,
        "count": count,
        "selectors": [{"cel": {"expression": selector}}],
    }
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


def allocated(node: VMNode, name: str) -> CPUSet:
    c = node.kubectl.json("-n", NS, "get", "resourceclaim", name)
    results = c.get("status", {}).get("allocation", {}).get("devices", {}).get("results", [])
    names = [r["device"] for r in results if r["driver"] == DRIVER]
    return CPUSet.parse(",".join(n.removeprefix("cpu-") for n in names))


def place(node: VMNode, *docs: dict[str, Any]) -> None:
    node.kubectl.apply(w.dump(*docs))
    for d in docs:
        if d["kind"] == "Pod":
            w.wait_pod_running(node.kubectl, NS, d["metadata"]["name"], timeout=scaled(120))


def effective(node: VMNode, pod: str, what: str = "cpus") -> str:
    return node.read(f"{node.container_cgroup(NS, pod)}/cpuset.{what}.effective")


def cpus(node: VMNode, pod: str) -> CPUSet:
    return CPUSet.parse(effective(node, pod))


def test_a_claim_for_two_cpus_of_numa_node_1_is_the_pods_alone_and_back_to_the_pool(
    node: VMNode,
) -> None:
    # Every CPU but the reserved one is a device of the driver's slice.
    assert node.slice_devices() == ["cpu-1", "cpu-2", "cpu-3"]
    place(node, w.pod("shared", NS, w.container("app", w.burstable())))
    assert cpus(node, "shared") == ALL
    place(node, numa_claim("node1", 2, 1), claimed_pod("claimed", "node1"))
    assert allocated(node, "node1") == NODE1
    assert cpus(node, "claimed") == NODE1
    assert effective(node, "claimed", "mems") == "1"
    # Nobody else runs on them: the shared pod moved off.
    wait_for("the shared pod off the claimed CPUs", lambda: not (cpus(node, "shared") & NODE1))
    assert cpus(node, "shared") == ALL - NODE1
    place(node, w.pod("later", NS, w.container("app", w.burstable())))
    assert cpus(node, "later") == ALL - NODE1
    # Deleting the pod returns them to the shared pool.
    node.kubectl.run("-n", NS, "delete", "pod", "claimed", "--wait=true", timeout=scaled(120))
    wait_for(
        "the claimed CPUs back in the shared pool",
        lambda: cpus(node, "shared") == ALL and cpus(node, "later") == ALL,
    )
