"""The node's NodeResourceTopology (topology.node.k8s.io/v1alpha2) as plain data.

One object per node, named after it and owned by its Node. A zone of type `Socket` per
socket, and one of type `Node` per NUMA node, named `node-N` as the scheduler plugin
(NodeResourceTopologyMatch) reads them, with its socket as parent, its NUMA distances as
costs, and `cpu` and `memory` resources: capacity (online), allocatable (what containers may
get: `availableCPUs` less the reserved CPUs; all the memory) and available (what a new
exclusive container could still get there, see `enforcer.usage.accounting`). Quantities are
written as Kubernetes writes them: strings, memory with the largest binary suffix that is
exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from enforcer.usage.accounting import NodeUsage, Usage, socket_totals

NRT_GROUP = "topology.node.k8s.io"
NRT_VERSION = "v1alpha2"
NRT_API_VERSION = f"{NRT_GROUP}/{NRT_VERSION}"
NRT_KIND = "NodeResourceTopology"
NRT_PLURAL = "noderesourcetopologies"
MANAGED_BY = "resource-enforcer"
POLICY_ATTRIBUTE = "resource-enforcer.dev/policy"

_SUFFIXES: tuple[tuple[str, int], ...] = tuple(
    (suffix, 1 << (10 * power)) for power, suffix in reversed(list(enumerate("KMGTPE", 1)))
)


@dataclass(frozen=True)
class Alignment:
    """What the object tells the scheduler about how containers are aligned on the node, in
    the words of kubelet's Topology Manager (the plugin's filter acts on single-numa-node)."""

    policy: str  # none | best-effort | restricted | single-numa-node
    scope: str  # container | pod


def alignment(policy_name: str, configured: str | None, scope: str) -> Alignment:
    """The configured policy, else single-numa-node where the enforcer's policy keeps a
    container that fits in one NUMA node there (topology-aware), none otherwise."""
    if configured is None:
        configured = "single-numa-node" if policy_name == "topology-aware" else "none"
    return Alignment(configured, scope)


def quantity(value: int, binary: bool = False) -> str:
    """An integer as the API server writes a Quantity (never below zero here)."""
    value = max(0, value)
    if binary and value:
        for suffix, size in _SUFFIXES:
            if value % size == 0:
                return f"{value // size}{suffix}i"
    return str(value)


def _resources(nodes: list[NodeUsage]) -> list[dict[str, str]]:
    resources = []
    if any(n.cpus for n in nodes):
        resources.append(
            {
                "name": "cpu",
                "capacity": quantity(sum(n.cpu_capacity for n in nodes)),
                "allocatable": quantity(sum(n.cpu_allocatable for n in nodes)),
                "available": quantity(sum(n.cpu_available for n in nodes)),
            }
        )
    if any(n.memory_capacity for n in nodes):
        resources.append(
            {
                "name": "memory",
                "capacity": quantity(sum(n.memory_capacity for n in nodes), binary=True),
                "allocatable": quantity(sum(n.memory_allocatable for n in nodes), binary=True),
                "available": quantity(sum(max(0, n.memory_available) for n in nodes), binary=True),
            }
        )
    return resources


def node_resource_topology(
    node_name: str, node_uid: str, usage: Usage, how: Alignment
) -> dict[str, Any]:
    """The whole object, ready to be created or to replace the one in the cluster."""
    zones: list[dict[str, Any]] = []
    for socket, nodes in socket_totals(usage.nodes).items():
        zones.append({"name": f"socket-{socket}", "type": "Socket", "resources": _resources(nodes)})
    for node in usage.nodes:
        zone: dict[str, Any] = {"name": f"node-{node.node}", "type": "Node"}
        if node.socket is not None:
            zone["parent"] = f"socket-{node.socket}"
        if node.distances:
            zone["costs"] = [{"name": f"node-{n}", "value": d} for n, d in node.distances]
        if node.cpus:
            zone["attributes"] = [{"name": "cpus", "value": str(node.cpus)}]
        zone["resources"] = _resources([node])
        zones.append(zone)
    return {
        "apiVersion": NRT_API_VERSION,
        "kind": NRT_KIND,
        "metadata": {
            "name": node_name,
            "labels": {"app.kubernetes.io/managed-by": MANAGED_BY},
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid}
            ],
        },
        "attributes": [
            {"name": "topologyManagerPolicy", "value": how.policy},
            {"name": "topologyManagerScope", "value": how.scope},
            {"name": POLICY_ATTRIBUTE, "value": usage.policy},
        ],
        "zones": zones,
    }
