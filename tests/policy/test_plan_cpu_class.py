"""`plan`'s `cpuClass` column (CONTRACT.md): the CPU class of a container's own CPUs, its
exclusive ones under topology-aware (by the cpuclass annotation) or its balloon's (by the balloon
type's cpuClass), and null for CPUs it shares with the pool or for a class that is not applied."""

from __future__ import annotations

import yaml

from enforcer.commands.manifests import Pod, pods_of
from enforcer.commands.plan import plan
from enforcer.configuration import parse_config
from enforcer.topology import CPUSet, Topology

TOPOLOGY_AWARE = """
policy: {name: topology-aware, reservedCPUs: 2}
cpuClasses:
  turbo: {minFreq: 2800000}
"""

BALLOONS = """
policy:
  name: balloons
  reservedCPUs: 2
  balloonTypes:
    - {name: inference, namespaces: ["ai"], minCPUs: 2, maxCPUs: 4, maxBalloons: 1, cpuClass: turbo}
    - {name: batch, namespaces: ["batch"], maxCPUs: 2, maxBalloons: 1}
cpuClasses:
  turbo: {minFreq: 2800000}
"""


def _pod(namespace: str, name: str, cpu: str, annotations: dict[str, str] | None = None) -> Pod:
    doc = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations or {}},
        "spec": {
            "containers": [
                {"name": "c", "image": "x", "resources": {"limits": {"cpu": cpu, "memory": "1Gi"}}}
            ]
        },
    }
    [pod] = pods_of(doc, "test")
    return pod


def _rows(config: str, topology: Topology, pods: list[Pod]) -> dict[str, dict]:
    _, rows = plan(parse_config(yaml.safe_load(config)), topology, pods)
    return {r["pod"]: r for r in rows}


def test_exclusive_cpus_carry_the_annotated_class_and_shared_ones_none(
    topologies: dict[str, Topology],
) -> None:
    turbo = {"cpuclass.resource-enforcer.dev/pod": "turbo"}
    rows = _rows(
        TOPOLOGY_AWARE,
        topologies["desktop"],
        [
            _pod("prod", "fast", "2", turbo),
            _pod("prod", "plain", "2"),
            _pod("prod", "shared", "500m", turbo),  # asks, but holds no CPU of its own
        ],
    )
    assert rows["fast"]["error"] is None
    assert len(CPUSet.parse(rows["fast"]["exclusiveCPUs"])) == 2
    assert rows["fast"]["cpuClass"] == "turbo"
    assert rows["plain"]["cpuClass"] is None
    assert rows["shared"]["cpuClass"] is None


def test_a_balloons_cpus_carry_its_types_class(topologies: dict[str, Topology]) -> None:
    rows = _rows(
        BALLOONS,
        topologies["desktop"],
        [_pod("ai", "llm", "1"), _pod("batch", "job", "1")],
    )
    assert rows["llm"]["balloon"] == "inference[0]"
    assert rows["llm"]["cpuClass"] == "turbo"
    assert rows["job"]["balloon"] == "batch[0]"
    assert rows["job"]["cpuClass"] is None
