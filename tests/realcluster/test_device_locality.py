"""policy.preferCloseToDevices on the real node (issue 26, item 5), in both modes: the test-only
device plugin (tests/support/fake_device_plugin.py) registers with kubelet and advertises
`example.com/fake-nic` (one device, its TopologyInfo on NUMA node 0, this machine's only node)
and `example.com/far-nic` (one device on NUMA node 7, which the machine does not have). The
enforcer reads a container's devices from kubelet's pod-resources API before it decides.

A Guaranteed 1-CPU pod given the fake NIC gets its CPU on node 0 (CPU 1, read from its cgroup)
and the enforcer says it placed it close to that device (`status`, from its state folder); a pod
given the far NIC runs too, placed as without the key, with the reason naming node 7.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from enforcer.topology import CPUSet
from tests.support.cluster import truth
from tests.support.cluster import workloads as w
from tests.support.cluster.bed import Cluster
from tests.support.cluster.layout import NODE_NAME, REPO

NS = "devices"
NIC, FAR = "example.com/fake-nic", "example.com/far-nic"
CONFIG = 'policy:\n  name: static\n  reservedCPUs: "0"\n  preferCloseToDevices: true\n'
NODE0 = CPUSet.parse(Path("/sys/devices/system/node/node0/cpulist").read_text())


def allocatable(cluster: Cluster) -> dict[str, Any]:
    node = cluster.kubectl.json("get", "node", NODE_NAME)
    found: dict[str, Any] = node["status"].get("allocatable", {})
    return found


@pytest.fixture(scope="module")
def plugged(cluster: Cluster) -> Iterator[Cluster]:
    log = open(cluster.lay.logs / "fake-device-plugin.log", "ab")  # noqa: SIM115
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.support.fake_device_plugin",  # kubelet's fixed device-plugins folder
            "--resource",
            f"{NIC}=nic-0:0",
            "--resource",
            f"{FAR}=far-0:7",
        ],
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        w.wait_for(
            "kubelet to advertise the fake devices",
            lambda: allocatable(cluster).get(NIC) == "1" and allocatable(cluster).get(FAR) == "1",
        )
        w.configure(cluster.kubectl, CONFIG)
        cluster.kubectl.apply(w.dump(w.namespace(NS)))
        yield cluster
    finally:
        w.delete_namespace(cluster.kubectl, NS)
        w.configure(cluster.kubectl)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
        log.close()


def with_device(name: str, resource: str) -> dict[str, Any]:
    resources = w.guaranteed("1")
    resources["limits"][resource] = "1"
    return w.pod(name, NS, w.container("app", resources))


def status_row(cluster: Cluster, pod: str) -> dict[str, Any]:
    cli = Path(sys.executable).parent / "resource-enforcer"
    argv = [str(cli), "status", f"--state-dir={cluster.lay.enforcer_state}", "--output=json"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    (row,) = [r for r in json.loads(out.stdout)["containers"] if r["pod"] == pod]
    return dict(row)


def run(cluster: Cluster, name: str, resource: str) -> CPUSet:
    cluster.kubectl.apply(w.dump(with_device(name, resource)))
    w.wait_pod_running(cluster.kubectl, NS, name)
    (c,) = truth.containers_of(cluster.kubectl, NS, name)
    return CPUSet.parse(c.cpus)


def test_a_pod_with_a_device_gets_its_cpu_on_the_devices_node(plugged: Cluster) -> None:
    cpus = run(plugged, "near", NIC)
    assert cpus == CPUSet.parse("1") and cpus <= NODE0
    note = status_row(plugged, "near")["devices"]
    assert note == f"close to devices {NIC}=nic-0 on NUMA node 0"
    plugged.kubectl.run("-n", NS, "delete", "pod", "near", "--wait=true", timeout=120)


def test_a_device_on_a_node_the_host_lacks_gets_the_normal_placement(plugged: Cluster) -> None:
    cpus = run(plugged, "far", FAR)
    assert cpus == CPUSet.parse("1")  # the static policy's one exclusive CPU, as without the key
    note = status_row(plugged, "far")["devices"]
    assert f"devices {FAR}=far-0 are on NUMA node 7, which this machine does not have" in note
    assert "normal placement" in note
    plugged.kubectl.run("-n", NS, "delete", "pod", "far", "--wait=true", timeout=120)
