"""The topology-aware policy: hand-checked cases on synthetic machines and the real snapshots:
the pool tree, eligibility, isolated CPUs, placements on the snapshots. The synthetic MACHINE
(2 sockets x 2 NUMA nodes x 2 cores x 2 threads) is described in `tests/policy/tasupport.py`;
capacity, restore and reconfiguration are in `test_topology_aware_capacity.py`.
"""

from __future__ import annotations

import pytest

from enforcer.topology import CPUSet, Topology
from tests.policy.tasupport import MACHINE, GiB, node, policy, req

# ----- the pool tree -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "names"),
    [
        ({}, ["root"]),  # 1 socket, 1 die, 1 node: every level collapses
        ({"sockets": 2}, ["root", "socket0", "socket1"]),  # nodes collapse into sockets
        (
            {"sockets": 2, "nodes_per_die": 2},
            [
                "root",
                "socket0",
                "socket0/node0",
                "socket0/node1",
                "socket1",
                "socket1/node2",
                "socket1/node3",
            ],
        ),
        ({"nodes_per_die": 2}, ["root", "node0", "node1"]),  # the single socket collapses
        (
            {"dies_per_socket": 2, "nodes_per_die": 2},
            ["root", "die0", "die0/node0", "die0/node1", "die1", "die1/node2", "die1/node3"],
        ),
        (
            {"sockets": 2, "dies_per_socket": 2},
            [
                "root",
                "socket0",
                "socket0/die0",
                "socket0/die1",
                "socket1",
                "socket1/die0",
                "socket1/die1",
            ],
        ),
    ],
)
def test_pool_tree_of_synthetic_shapes(shape: dict, names: list[str]) -> None:
    assert policy(Topology.synthetic(**shape)).pool_names() == names


def test_pool_tree_follows_available_cpus() -> None:
    # Only socket0 available: the root is socket0, its children the two nodes.
    p = policy(availableCPUs="0-3,8-11")
    assert p.pool_names() == ["root", "node0", "node1"]
    assert [v.cpus for v in p.pools()] == [CPUSet.parse("0-3,8-11"), node(0), node(1)]


@pytest.mark.parametrize(
    ("snapshot", "names", "mems"),
    [
        (
            "4-socket-server-nosnc",
            ["root", "socket0", "socket1", "socket2", "socket3"],
            ["0-3", "0", "1", "2", "3"],
        ),
        # Sub-NUMA clustering: two nodes per socket; PMEM node 4 belongs to node 0 and
        # node 5 to node 2 (distance 17), so socket1 has no memory-only node.
        (
            "server",
            [
                "root",
                "socket0",
                "socket0/node0",
                "socket0/node2",
                "socket1",
                "socket1/node1",
                "socket1/node3",
            ],
            ["0-5", "0,2,4-5", "0,4", "2,5", "1,3", "1", "3"],
        ),
        ("desktop", ["root"], ["0"]),
        ("sample1", ["root"], ["0"]),
        (
            "2-socket-4-node-40-core",
            [
                "root",
                "socket0",
                "socket0/node0",
                "socket0/node1",
                "socket1",
                "socket1/node2",
                "socket1/node3",
            ],
            ["0-3", "0-1", "0", "1", "2-3", "2", "3"],
        ),
        (
            "sample2",
            [
                "root",
                "socket0",
                "socket0/node0",
                "socket0/node2",
                "socket1",
                "socket1/node1",
                "socket1/node3",
            ],
            ["0-7", "0,2,4-5", "0,4", "2,5", "1,3,6-7", "1,6", "3,7"],
        ),
    ],
)
def test_pool_tree_of_the_snapshots(
    topologies: dict[str, Topology], snapshot: str, names: list[str], mems: list[str]
) -> None:
    views = policy(topologies[snapshot]).pools()
    assert [v.name for v in views] == names
    assert [str(v.mems) for v in views] == mems
    assert views[0].cpus == topologies[snapshot].online
    # A pool's memory is its nodes' plus the memory-only nodes attached to them.
    topo = topologies[snapshot]
    for v in views:
        assert v.memory_capacity == sum(topo.nodes[n].memory_bytes for n in v.mems)


# ----- eligibility ---------------------------------------------------------------------------


def test_guaranteed_integer_gets_whole_cores_of_one_node() -> None:
    p = policy(reservedCPUs="0")
    g = p.admit(req("g", 2000))
    # node0 lost CPU 0 to the reserved set, so node1 (the first idle node) serves it: one core.
    assert g.kind == "exclusive" and g.pool == "socket0/node1"
    assert g.cpus == g.exclusive == CPUSet.of(2, 10)
    assert g.mems == CPUSet.of(1)


def test_shared_kinds_and_what_they_run_on() -> None:
    p = policy(reservedCPUs="0")
    for name, milli, qos in [
        ("b", 1500, "Burstable"),
        ("e", 0, "BestEffort"),
        ("small", 500, "Guaranteed"),
    ]:
        placed = p.admit(req(name, milli, qos))
        assert placed.kind == "shared" and not placed.exclusive
        assert 0 not in placed.cpus  # never on the reserved CPUs
        assert placed.mems == MACHINE.memory_nodes_of_cpus(placed.cpus)
    # Least loaded first: each went to a different, idle node.
    assert [p.placement(req(n).key).pool for n in ("b", "e", "small")] == [
        "socket0/node1",
        "socket1/node2",
        "socket1/node3",
    ]


def test_reserved_namespace_and_prefer_reserved_run_on_reserved_cpus() -> None:
    p = policy(reservedCPUs="0,8", reservedNamespaces=["kube-system"])
    daemon = p.admit(req("daemon", 2000, namespace="kube-system"))
    assert (daemon.kind, daemon.pool, daemon.cpus, daemon.mems) == (
        "reserved",
        "reserved",
        CPUSet.of(0, 8),
        CPUSet.of(0),
    )
    asked = p.admit(req("asked", 0, "BestEffort", reserved=True))
    assert asked.kind == "reserved"
    # The annotation overrides the namespace the other way too.
    opted_out = p.admit(req("out", 1000, namespace="kube-system", reserved=False))
    assert opted_out.kind == "exclusive"


def test_without_reserved_cpus_the_reserved_namespace_is_shared() -> None:
    placed = policy().admit(req("daemon", 100, "Burstable", namespace="kube-system"))
    assert placed.kind == "shared"


def test_mixed_gets_the_integer_part_exclusive_and_the_fraction_shared() -> None:
    p = policy(reservedCPUs="0")
    mixed = p.admit(req("m", 2500))
    assert mixed.kind == "mixed" and mixed.pool == "socket0/node1"
    assert mixed.exclusive == CPUSet.of(2, 10)
    # The shared part is the rest of node1: the other core.
    assert mixed.cpus == node(1) and mixed.cpus - mixed.exclusive == CPUSet.of(3, 11)
    assert {v.name: v.shared_milli for v in p.pools()}["socket0/node1"] == 500


@pytest.mark.parametrize(
    ("config", "prefs", "kind"),
    [
        ({}, {"shared": True}, "shared"),
        ({"preferSharedCPUs": True}, {}, "shared"),
        ({"preferSharedCPUs": True}, {"shared": False}, "mixed"),  # annotation wins
    ],
)
def test_prefer_shared_makes_a_mixed_container_all_shared(
    config: dict, prefs: dict, kind: str
) -> None:
    placed = policy(reservedCPUs="0", **config).admit(req("m", 2500, **prefs))
    assert placed.kind == kind
    if kind == "shared":
        assert not placed.exclusive


def test_prefer_shared_also_covers_whole_cpus(topologies: dict[str, Topology]) -> None:
    p = policy(reservedCPUs="0")
    assert p.admit(req("asked", 2000, shared=True)).kind == "shared"
    q = policy(topologies["server"], reservedCPUs="0,56", preferSharedCPUs=True)
    assert q.admit(req("default", 2000)).kind == "shared"
    assert q.admit(req("declined", 2000, shared=False)).kind == "exclusive"
    # An explicit request for an isolated CPU beats the configured default.
    assert q.admit(req("isolated", 1000, isolated=True)).exclusive <= CPUSet.parse("4-7,60-63")


def test_preserve_keeps_kubelets_cpus_cut_to_the_shared_cpus() -> None:
    placed = policy(reservedCPUs="0").admit(req("p", 2000, preserve=True))
    # kubelet asked for every CPU: all but the reserved one; memory nodes left to kubelet.
    assert (placed.kind, placed.cpus, placed.mems, placed.exclusive) == (
        "preserved",
        MACHINE.online - CPUSet.of(0),
        None,
        CPUSet(),
    )


def test_without_pin_memory_mems_are_left_alone() -> None:
    p = policy(reservedCPUs="0", pinMemory=False)
    assert p.admit(req("g", 2000)).mems is None
    assert p.admit(req("b", 0, "BestEffort")).mems is None


# ----- isolated CPUs -------------------------------------------------------------------------


def test_one_cpu_guaranteed_gets_an_isolated_cpu_on_server(
    topologies: dict[str, Topology],
) -> None:
    server = topologies["server"]  # isolated 4-7,60-63: two per node, one core per node
    p = policy(server, reservedCPUs="0,56")
    got = [p.admit(req(f"g{i}", 1000)) for i in range(9)]
    # One per node while every node has two free, least loaded first, in pool order
    # (node0, node2, node1, node3), then the second thread of each core.
    assert [next(iter(g.exclusive)) for g in got[:8]] == [4, 6, 5, 7, 60, 62, 61, 63]
    assert [g.pool for g in got[:4]] == [
        "socket0/node0",
        "socket0/node2",
        "socket1/node1",
        "socket1/node3",
    ]
    # The PMEM nodes go with nodes 0 and 2.
    assert [str(g.mems) for g in got[:4]] == ["0,4", "2,5", "1", "3"]
    # Isolated CPUs used up: the ninth gets an ordinary CPU.
    assert not got[8].exclusive & server.isolated


def test_isolated_cpus_follow_annotation_over_config(topologies: dict[str, Topology]) -> None:
    server = topologies["server"]
    p = policy(server, reservedCPUs="0,56", preferIsolatedCPUs=False)
    assert not p.admit(req("plain", 1000)).exclusive & server.isolated
    assert p.admit(req("asked", 1000, isolated=True)).exclusive <= server.isolated
    q = policy(server, reservedCPUs="0,56")
    assert not q.admit(req("declined", 1000, isolated=False)).exclusive & server.isolated


def test_isolated_cpus_never_serve_shared_or_multi_cpu_work(
    topologies: dict[str, Topology],
) -> None:
    server = topologies["server"]
    p = policy(server, reservedCPUs="0,56")
    placed = [
        p.admit(req("two", 2000, isolated=True)),
        p.admit(req("b", 0, "BestEffort")),
        p.admit(req("m", 1500)),
    ]
    for placement in placed:
        assert not placement.cpus & server.isolated


# ----- snapshots -----------------------------------------------------------------------------


def test_sixteen_cpus_land_in_one_numa_node(topologies: dict[str, Topology]) -> None:
    topo = topologies["2-socket-4-node-40-core"]  # 20 CPUs (10 cores) per node
    p = policy(topo, reservedCPUs=2)
    placed = p.admit(req("big", 16000))
    assert len(topo.nodes_of_cpus(placed.exclusive)) == 1
    assert placed.pool.endswith("/node" + str(next(iter(topo.nodes_of_cpus(placed.exclusive)))))
    assert all(topo.siblings(c) <= placed.exclusive for c in placed.exclusive)  # 8 whole cores
    assert placed.mems == CPUSet(topo.nodes_of_cpus(placed.exclusive))


def test_memory_only_nodes_go_with_their_cpu_node(topologies: dict[str, Topology]) -> None:
    sample2 = topologies["sample2"]  # memory-only 4,5,6,7 attach to 0,2,1,3
    p = policy(sample2, reservedCPUs="0,56", preferIsolatedCPUs=False)
    placed = [p.admit(req(f"g{i}", 2000)) for i in range(4)]
    # Least loaded first: node0 has 24 usable CPUs (28 minus the reserved core and the two
    # isolated CPUs), the others 26; ties go in pool order (node0, node2, node1, node3).
    assert [(g.pool, str(g.mems)) for g in placed] == [
        ("socket0/node2", "2,5"),
        ("socket1/node1", "1,6"),
        ("socket1/node3", "3,7"),
        ("socket0/node0", "0,4"),
    ]
    shared = p.admit(req("b", 0, "BestEffort"))
    assert shared.mems == sample2.memory_nodes_of_cpus(shared.cpus)


def test_memory_decides_the_pool(topologies: dict[str, Topology]) -> None:
    topo = topologies["2-socket-4-node-40-core"]  # ~46-47 GiB per node, ~92-94 per socket
    p = policy(topo, reservedCPUs=2)
    first = p.admit(req("a", 1000, "Burstable", memory=60 * GiB))
    second = p.admit(req("b", 1000, "Burstable", memory=60 * GiB))
    third = p.admit(req("c", 1000, "Burstable", memory=60 * GiB))
    # 60 GiB fits no node, so a socket; two sockets, then only the root (which may overcommit).
    assert [first.pool, second.pool, third.pool] == ["socket1", "socket0", "root"]
    assert first.mems == CPUSet.of(2, 3)
    used = {v.name: v.memory_used for v in p.pools()}
    assert used["socket1"] >= 60 * GiB and used["root"] == 180 * GiB
