"""The node's use by pool and NUMA node, the NodeResourceTopology built from it, and the gauges:
pure code on synthetic machines and on the recorded servers.

Every object built here is also checked against the CRD's own schema (the vendored
deploy/components/node-resource-topology/crd.yaml) with the validator the fake API server uses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from enforcer.decode import ContainerRequest, Preferences
from enforcer.metrics import EnforcerMetrics
from enforcer.policy import Policy, make_policy
from enforcer.topology import CPUSet, Topology
from enforcer.usage import alignment, measure, node_resource_topology
from resource_contract.policy_config import PolicyConfig
from tests.support.crd_schema import CustomResource, served_versions

ROOT = Path(__file__).resolve().parents[2]
CRD = ROOT / "deploy" / "components" / "node-resource-topology" / "crd.yaml"
GiB = 1 << 30
# 2 sockets x 2 NUMA nodes x 2 cores x 2 threads; CPUs 0,8 1,9 in node 0, and so on.
MACHINE = Topology.synthetic(sockets=2, nodes_per_die=2, cores_per_node=2)


@pytest.fixture(scope="module")
def v1alpha2() -> CustomResource:
    crd = yaml.safe_load(CRD.read_text())
    (served,) = [v for v in served_versions(crd) if v.version == "v1alpha2"]
    return served


def req(name: str, milli: int, qos: str = "Guaranteed", memory: int = 0) -> ContainerRequest:
    return ContainerRequest(
        pod_uid=f"uid-{name}",
        pod_name=name,
        namespace="ns",
        container=name,
        qos=qos,  # type: ignore[arg-type]
        cpu_request_milli=milli,
        cpu_limit_milli=milli if qos == "Guaranteed" else 0,
        memory_request=memory,
        memory_limit=memory,
        preferences=Preferences(),
    )


def policy(topology: Topology = MACHINE, **config: Any) -> Policy:
    return make_policy(topology, PolicyConfig(**config))


def zone(obj: dict[str, Any], name: str) -> dict[str, Any]:
    (found,) = [z for z in obj["zones"] if z["name"] == name]
    return found


def resource(obj: dict[str, Any], zone_name: str, name: str) -> dict[str, str]:
    (found,) = [r for r in zone(obj, zone_name)["resources"] if r["name"] == name]
    return found


def nrt(p: Policy, topology: Topology = MACHINE, configured: str | None = None) -> dict[str, Any]:
    usage = measure(topology, p)
    return node_resource_topology("worker-1", "uid-1", usage, alignment(p.name, configured, "pod"))


def test_an_idle_node(v1alpha2: CustomResource) -> None:
    obj = nrt(policy(name="topology-aware", reservedCPUs="0"))
    assert obj["apiVersion"] == "topology.node.k8s.io/v1alpha2"
    assert obj["kind"] == "NodeResourceTopology"
    assert obj["metadata"]["name"] == "worker-1"
    assert obj["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": "worker-1", "uid": "uid-1"}
    ]
    assert [(z["name"], z["type"], z.get("parent")) for z in obj["zones"]] == [
        ("socket-0", "Socket", None),
        ("socket-1", "Socket", None),
        ("node-0", "Node", "socket-0"),
        ("node-1", "Node", "socket-0"),
        ("node-2", "Node", "socket-1"),
        ("node-3", "Node", "socket-1"),
    ]
    # CPU 0 is reserved: node 0 keeps 3 of its 4 CPUs for containers.
    assert resource(obj, "node-0", "cpu") == {
        "name": "cpu",
        "capacity": "4",
        "allocatable": "3",
        "available": "3",
    }
    assert resource(obj, "node-1", "cpu")["available"] == "4"
    assert resource(obj, "socket-0", "cpu") == {
        "name": "cpu",
        "capacity": "8",
        "allocatable": "7",
        "available": "7",
    }
    assert resource(obj, "node-2", "memory") == {
        "name": "memory",
        "capacity": "16Gi",
        "allocatable": "16Gi",
        "available": "16Gi",
    }
    assert zone(obj, "node-0")["costs"][:2] == [
        {"name": "node-0", "value": 10},
        {"name": "node-1", "value": MACHINE.distance(0, 1)},
    ]
    assert zone(obj, "node-0")["attributes"] == [{"name": "cpus", "value": "0-1,8-9"}]
    assert obj["attributes"] == [
        {"name": "topologyManagerPolicy", "value": "single-numa-node"},
        {"name": "topologyManagerScope", "value": "pod"},
        {"name": "resource-enforcer.dev/policy", "value": "topology-aware"},
    ]
    checked = v1alpha2.schema.check(obj)
    assert (checked.unknown, checked.causes) == ([], [])


def test_exclusive_cpus_and_pinned_memory_leave_their_node() -> None:
    p = policy(name="topology-aware", reservedCPUs="0")
    placement = p.admit(req("big", 3000, memory=4 * GiB))
    assert placement.cpus is not None
    (home,) = MACHINE.nodes_of_cpus(placement.cpus)  # the policy keeps it in one node
    obj = nrt(p)
    name = f"node-{home}"
    allocatable = int(resource(obj, name, "cpu")["allocatable"])
    assert int(resource(obj, name, "cpu")["available"]) == allocatable - 3
    assert resource(obj, name, "memory")["available"] == "12Gi"
    for other in set(MACHINE.nodes) - {home}:
        cpu = resource(obj, f"node-{other}", "cpu")
        assert cpu["available"] == cpu["allocatable"]
        assert resource(obj, f"node-{other}", "memory")["available"] == "16Gi"
    # Released: the node is whole again.
    p.release(req("big", 3000).key)
    assert resource(nrt(p), name, "cpu")["available"] == str(allocatable)


def test_shared_grants_count_where_their_cpus_are() -> None:
    p = policy(name="topology-aware")
    p.admit(req("a", 1500, qos="Burstable"))  # a shared grant, in some pool
    usage = measure(MACHINE, p)
    placement = p.placement(req("a", 1500).key)
    assert placement.cpus is not None
    inside = [n for n in usage.nodes if placement.cpus <= n.cpus]
    for node in usage.nodes:
        open_cpus = node.cpu.shared + node.cpu.isolated
        assert node.cpu.free == open_cpus - (2 if node in inside else 0)
    root = usage.pools[0]
    assert root.name == "root"
    assert root.cpu.free == 16 - 2  # every grant counts at the root


def test_uses_partition_the_cpus_of_every_zone() -> None:
    topo = Topology.synthetic(sockets=2, nodes_per_die=2, cores_per_node=4, isolated="3,4")
    p = policy(topo, name="topology-aware", reservedCPUs="0-1")
    p.admit(req("one", 1000))  # prefers an isolated CPU
    p.admit(req("two", 2000))
    usage = measure(topo, p)
    for node in usage.nodes:
        cpu = node.cpu
        assert cpu.reserved + cpu.shared + cpu.exclusive + cpu.isolated == len(node.cpus)
    total = {use: sum(getattr(n.cpu, use) for n in usage.nodes) for use in ("exclusive",)}
    assert total["exclusive"] == 3
    assert sum(n.cpu.reserved for n in usage.nodes) == 2
    assert sum(n.cpu.isolated for n in usage.nodes) == 1  # one of two taken by "one"


@pytest.mark.parametrize(
    ("name", "configured", "expected"),
    [
        ("topology-aware", None, "single-numa-node"),
        ("static", None, "none"),
        ("none", None, "none"),
        ("static", "restricted", "restricted"),
        ("topology-aware", "best-effort", "best-effort"),
    ],
)
def test_alignment_told_to_the_scheduler(name: str, configured: str | None, expected: str) -> None:
    obj = nrt(policy(name=name), configured=configured)
    assert obj["attributes"][0] == {"name": "topologyManagerPolicy", "value": expected}
    assert obj["attributes"][2] == {"name": "resource-enforcer.dev/policy", "value": name}


@pytest.mark.parametrize("policy_name", ["none", "static", "topology-aware"])
def test_every_recorded_server_gives_a_valid_object(
    policy_name: str, topologies: dict[str, Topology], v1alpha2: CustomResource
) -> None:
    for server, topo in topologies.items():
        p = policy(topo, name=policy_name, reservedCPUs=1)
        big = min(len(n.cpus) for n in topo.nodes.values() if n.cpus) // 2
        p.admit(req("big", 1000 * max(big, 1), memory=GiB))
        p.admit(req("small", 250, qos="Burstable", memory=GiB))
        obj = nrt(p, topo)
        checked = v1alpha2.schema.check(obj)
        assert (server, checked.unknown, checked.causes) == (server, [], [])
        nodes = [z for z in obj["zones"] if z["type"] == "Node"]
        assert {z["name"] for z in nodes} == {f"node-{n}" for n in topo.nodes}
        cpus = [r for z in nodes for r in z["resources"] if r["name"] == "cpu"]
        assert sum(int(r["capacity"]) for r in cpus) == len(topo.online), server
        assert sum(int(r["allocatable"]) for r in cpus) == len(p.available - p.reserved)
        for r in cpus:
            assert 0 <= int(r["available"]) <= int(r["allocatable"]) <= int(r["capacity"])
        # Memory-only nodes (PMEM on "server") have memory and no CPUs, and no socket.
        for n in topo.memory_only_nodes():
            z = zone(obj, f"node-{n}")
            assert [r["name"] for r in z["resources"]] == ["memory"]
            assert "parent" not in z


# --- the validator itself: what it refuses, the real API server refuses ---------------------


def test_the_schema_refuses_what_the_api_server_refuses(v1alpha2: CustomResource) -> None:
    good = nrt(policy(name="static"))
    bad = yaml.safe_load(yaml.safe_dump(good))
    bad["zones"][0]["resources"][0]["available"] = "lots"
    del bad["zones"][1]["type"]
    bad["zones"][2]["costs"][0]["value"] = "near"
    bad["zones"][3]["resources"][0]["capacity"] = 1.5
    bad["zones"][3]["flavour"] = "vanilla"
    bad["metadata"]["ownerReferences"][0]["uid"] = ""
    checked = v1alpha2.schema.check(bad)
    assert checked.unknown == ["zones[3].flavour"]
    assert sorted(c.field for c in checked.causes) == [
        "metadata.ownerReferences[0].uid",
        "zones[0].resources[0].available",
        "zones[1].type",
        "zones[2].costs[0].value",
        "zones[3].resources[0].capacity",
    ]
    assert "flavour" not in checked.obj["zones"][3]  # pruned, as the server stores it
    no_zones = {k: v for k, v in good.items() if k != "zones"}
    assert [c.message for c in v1alpha2.schema.check(no_zones).causes] == ["zones: Required value"]


# --- the gauges -------------------------------------------------------------------------------


def samples(metrics: EnforcerMetrics, name: str) -> dict[tuple[str, str], float]:
    text = generate_latest(metrics.registry).decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name:
                key = s.labels.get("pool") or s.labels["node"]
                out[(key, s.labels["use"])] = s.value
    return out


def test_gauges_by_pool_and_numa_node() -> None:
    metrics = EnforcerMetrics()
    p = policy(name="topology-aware", reservedCPUs="0")
    placement = p.admit(req("big", 2000, memory=2 * GiB))
    assert placement.cpus is not None
    (home,) = MACHINE.nodes_of_cpus(placement.cpus)
    metrics.set_usage(measure(MACHINE, p))
    numa = samples(metrics, "resource_enforcer_numa_node_cpus")
    assert numa[(str(home), "exclusive")] == 2
    assert sum(v for (_, use), v in numa.items() if use == "exclusive") == 2
    assert numa[("0", "reserved")] == 1
    pools = samples(metrics, "resource_enforcer_pool_cpus")
    assert {pool for pool, _ in pools} == {
        "root",
        "socket0",
        "socket1",
        "socket0/node0",
        "socket0/node1",
        "socket1/node2",
        "socket1/node3",
    }
    assert pools[("root", "exclusive")] == 2
    assert pools[("root", "free")] == 16 - 1 - 2
    memory = samples(metrics, "resource_enforcer_numa_node_memory_bytes")
    assert memory[(str(home), "available")] == 14 * GiB
    assert memory[(str(home), "capacity")] == 16 * GiB

    # A configuration without the pool tree: the old pools' series go, the root stays.
    metrics.set_usage(measure(MACHINE, policy(name="static", reservedCPUs="0")))
    pools = samples(metrics, "resource_enforcer_pool_cpus")
    assert {pool for pool, _ in pools} == {"root"}
    assert pools[("root", "reserved")] == 1
    assert pools[("root", "shared")] == 15


def test_numa_gauges_match_the_objects_available_cpus() -> None:
    p = policy(name="topology-aware", reservedCPUs="0-1")
    p.admit(req("x", 3000))
    p.admit(req("y", 1000))
    metrics = EnforcerMetrics()
    usage = measure(MACHINE, p)
    metrics.set_usage(usage)
    numa = samples(metrics, "resource_enforcer_numa_node_cpus")
    obj = node_resource_topology("n", "u", usage, alignment(p.name, None, "container"))
    for n in MACHINE.nodes:
        assert numa[(str(n), "free")] == int(resource(obj, f"node-{n}", "cpu")["available"])
    assert CPUSet().union(*(MACHINE.cpus_of_node(n) for n in MACHINE.nodes)) == MACHINE.online
