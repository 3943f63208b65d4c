"""Placement on the real node, kubelet driving the runtime through the enforcer (NRI plugin or
CRI relay): the static policy with CPU 0 reserved on this 2-CPU machine. A Guaranteed 1-CPU pod
gets CPU 1 to itself, a Burstable pod runs on the shared pool without it, deleting the first
widens the shared pool again; `plan` on the same manifests predicts what the node did. Truth is
read from the cgroup files under kubelet's pod cgroups and from the runtime's container specs.
On containerd 2.x and on CRI-O (the ``crio-nri`` cluster).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from enforcer.topology import CPUSet
from tests.support.cluster import truth
from tests.support.cluster import workloads as w
from tests.support.cluster.bed import Cluster
from tests.support.cluster.layout import CGROUP_ROOT

# The one module that also runs on CRI-O's cluster (`make cluster-up RUNTIME=crio`).
pytestmark = pytest.mark.crio_cluster

NS = "placement"
ALL = CPUSet.parse(Path("/sys/fs/cgroup/cpuset/cpuset.cpus").read_text())
RESERVED = CPUSet.parse("0")
PODS = [
    w.pod("exclusive", NS, w.container("app", w.guaranteed("1"))),
    w.pod("shared", NS, w.container("app", w.burstable())),
    w.pod("best-effort", NS, w.container("app")),
]


def wait_for(what: str, check: Callable[[], object], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(1)


def cpus(cluster: Cluster, pod: str) -> CPUSet:
    (c,) = truth.containers_of(cluster.kubectl, NS, pod)
    return CPUSet.parse(c.cpus)


@pytest.fixture(scope="module")
def placed(cluster: Cluster) -> Iterator[Cluster]:
    if len(ALL) != 2:
        pytest.fail(f"these tests are written for the 2-CPU test machine, not {ALL}")
    w.configure(cluster.kubectl)
    cluster.kubectl.apply(w.dump(w.namespace(NS), *PODS))
    for p in PODS:
        w.wait_pod_running(cluster.kubectl, NS, p["metadata"]["name"])
    yield cluster
    w.delete_namespace(cluster.kubectl, NS)


def test_guaranteed_pod_gets_an_exclusive_cpu(placed: Cluster) -> None:
    (c,) = truth.containers_of(placed.kubectl, NS, "exclusive")
    assert c.qos == "Guaranteed" and c.cgroup.startswith(f"{CGROUP_ROOT}/kubepods/pod")
    assert CPUSet.parse(c.cpus) == ALL - RESERVED
    # The runtime holds the same pinning in the container's spec (what a restart re-applies).
    spec_cpus = truth.runtime_cpus(placed.lay, c.container_id)
    assert CPUSet.parse(spec_cpus) == ALL - RESERVED


@pytest.mark.parametrize(("pod", "qos"), [("shared", "burstable"), ("best-effort", "besteffort")])
def test_other_pods_run_on_the_shared_pool_without_it(placed: Cluster, pod: str, qos: str) -> None:
    (c,) = truth.containers_of(placed.kubectl, NS, pod)
    assert c.cgroup.startswith(f"{CGROUP_ROOT}/kubepods/{qos}/pod")
    assert CPUSet.parse(c.cpus) == RESERVED


def test_plan_predicts_what_the_node_did(placed: Cluster, tmp_path: Path) -> None:
    manifests = tmp_path / "pods.yaml"
    manifests.write_text(w.dump(*PODS))
    config = tmp_path / "config.yaml"
    config.write_text(w.STATIC_CONFIG)
    cli = Path(sys.executable).parent / "resource-enforcer"
    out = subprocess.run(
        [
            str(cli),
            "plan",
            "--config",
            str(config),
            "--sysfs-root",
            "/sys",
            "--pods",
            str(manifests),
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    predicted = {row["pod"]: CPUSet.parse(row["cpus"]) for row in json.loads(out.stdout)}
    assert predicted == {p: cpus(placed, p) for p in ("exclusive", "shared", "best-effort")}


def test_deletion_frees_the_cpu_and_widens_the_shared_pool(placed: Cluster) -> None:
    placed.kubectl.run("-n", NS, "delete", "pod", "exclusive", "--wait=true", timeout=120)
    wait_for("the shared pods' cpusets to widen", lambda: cpus(placed, "shared") == ALL)
    wait_for("the best-effort pod too", lambda: cpus(placed, "best-effort") == ALL)
    # The freed CPU is exclusive again for the next Guaranteed pod.
    again = w.pod("exclusive-again", NS, w.container("app", w.guaranteed("1")))
    placed.kubectl.apply(w.dump(again))
    w.wait_pod_running(placed.kubectl, NS, "exclusive-again")
    assert cpus(placed, "exclusive-again") == ALL - RESERVED
    wait_for("the shared pool to shrink again", lambda: cpus(placed, "shared") == RESERVED)
    placed.kubectl.run("-n", NS, "delete", "pod", "exclusive-again", "--wait=true", timeout=120)
