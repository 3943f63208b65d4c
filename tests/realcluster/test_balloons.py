"""The balloons policy and reserved namespaces on the real node, configured through the node's
ConfigMap (docs/install.md, Step 5): on this 2-CPU machine CPU 0 is reserved and a balloon type
`inference` (the namespace `balloons`) holds CPU 1 in its one balloon. Pods of that type land on
the balloon's CPU, whatever their QoS class; a pod in a reserved namespace (kube-system, which
the webhook leaves out, so the enforcer reads kubelet's CRI values) runs on the reserved CPU,
even a Guaranteed one that the static policy would give an exclusive CPU. `plan` on the same
manifests and configuration predicts it. Truth from the pods' cgroup files."""

from __future__ import annotations

import json
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

NS = "balloons"
SYSTEM_NS = "kube-system"
ALL = CPUSet.parse(Path("/sys/fs/cgroup/cpuset/cpuset.cpus").read_text())
RESERVED = CPUSet.of(0)
BALLOON = CPUSet.of(1)
# The enforcer's and the webhook's own pods are reserved too: the `default` balloon has no CPU
# left on this machine (every balloon of another type needs one of its own).
CONFIG = f"""\
policy:
  name: balloons
  reservedCPUs: "0"
  reservedNamespaces: [{SYSTEM_NS}, {w.ENFORCER_NS}]
  balloonTypes:
    - name: inference
      namespaces: ["{NS}"]
      minCPUs: 1
      maxCPUs: 1
      minBalloons: 1
      maxBalloons: 1
"""
BALLOON_PODS = [
    w.pod("burstable", NS, w.container("app", w.burstable())),
    w.pod("guaranteed", NS, w.container("app", w.guaranteed("200m"))),
]
SYSTEM_POD = w.pod("kre-reserved", SYSTEM_NS, w.container("app", w.guaranteed("1")))


def cpus_of(cluster: Cluster, pod: dict[str, Any]) -> CPUSet:
    meta = pod["metadata"]
    (c,) = truth.containers_of(cluster.kubectl, meta["namespace"], meta["name"])
    return CPUSet.parse(c.cpus)


@pytest.fixture(scope="module")
def ballooned(cluster: Cluster) -> Iterator[Cluster]:
    if len(ALL) != 2:
        pytest.fail(f"these tests are written for the 2-CPU test machine, not {ALL}")
    kubectl = cluster.kubectl
    w.configure(kubectl, CONFIG)
    try:
        kubectl.apply(w.dump(w.namespace(NS), *BALLOON_PODS, SYSTEM_POD))
        for p in [*BALLOON_PODS, SYSTEM_POD]:
            w.wait_pod_running(kubectl, p["metadata"]["namespace"], p["metadata"]["name"])
        yield cluster
    finally:
        kubectl.run(
            "-n",
            SYSTEM_NS,
            "delete",
            "pod",
            "kre-reserved",
            "--wait=true",
            "--ignore-not-found",
            timeout=180,
        )
        w.delete_namespace(kubectl, NS)
        w.configure(kubectl)


def test_pods_of_a_balloon_type_run_on_their_balloons_cpus(ballooned: Cluster) -> None:
    for p in BALLOON_PODS:
        assert cpus_of(ballooned, p) == BALLOON, p["metadata"]["name"]


def test_a_pod_of_a_reserved_namespace_runs_on_the_reserved_cpus(ballooned: Cluster) -> None:
    (c,) = truth.containers_of(ballooned.kubectl, SYSTEM_NS, "kre-reserved")
    assert c.qos == "Guaranteed"
    assert CPUSet.parse(c.cpus) == RESERVED
    # The webhook's own pods (a reserved namespace too) stay off the balloon's CPU.
    pods = ballooned.kubectl.json(
        "-n", w.ENFORCER_NS, "get", "pods", "-l", "app.kubernetes.io/name=resource-webhook"
    )["items"]
    assert pods
    for p in pods:
        for c in truth.containers_of(ballooned.kubectl, w.ENFORCER_NS, p["metadata"]["name"]):
            assert CPUSet.parse(c.cpus) == RESERVED, c.pod


def test_plan_predicts_the_balloons(ballooned: Cluster, tmp_path: Path) -> None:
    (tmp_path / "pods.yaml").write_text(w.dump(*BALLOON_PODS, SYSTEM_POD))
    (tmp_path / "config.yaml").write_text(CONFIG)
    cli = Path(sys.executable).parent / "resource-enforcer"
    out = subprocess.run(
        [
            str(cli),
            "plan",
            "--config",
            str(tmp_path / "config.yaml"),
            "--sysfs-root",
            "/sys",
            "--pods",
            str(tmp_path / "pods.yaml"),
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert {r["pod"]: r["balloon"] for r in rows} == {
        "burstable": "inference[0]",
        "guaranteed": "inference[0]",
        "kre-reserved": "reserved[0]",
    }
    pods = {p["metadata"]["name"]: p for p in [*BALLOON_PODS, SYSTEM_POD]}
    assert {r["pod"]: CPUSet.parse(r["cpus"]) for r in rows} == {
        name: cpus_of(ballooned, p) for name, p in pods.items()
    }
