"""The topology-aware policy: hand-checked cases on synthetic machines and the real snapshots.

The synthetic MACHINE below has 2 sockets x 2 NUMA nodes x 2 cores x 2 threads, numbered as
Linux does (first threads of all cores, then the second threads):

    socket0: node0 = cores {0,8} {1,9}      node1 = cores {2,10} {3,11}
    socket1: node2 = cores {4,12} {5,13}    node3 = cores {6,14} {7,15}

Every node has 16 GiB of memory.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from enforcer.commands.status import status
from enforcer.decode import ContainerRequest, Preferences
from enforcer.policy import PlacementError, TopologyAwarePolicy, make_policy
from enforcer.refusal import Reason
from enforcer.state import StateStore
from enforcer.topology import CPUSet, Topology
from resource_contract.policy_config import PolicyConfig

MACHINE = Topology.synthetic(sockets=2, nodes_per_die=2, cores_per_node=2)
GiB = 1 << 30


def node(n: int) -> CPUSet:
    return MACHINE.cpus_of_node(n)


def req(
    name: str,
    milli: int = 0,
    qos: str = "Guaranteed",
    *,
    pod: str | None = None,
    namespace: str = "ns",
    memory: int = 0,
    **prefs: bool,
) -> ContainerRequest:
    pod = pod or name
    return ContainerRequest(
        pod_uid=f"uid-{pod}",
        pod_name=pod,
        namespace=namespace,
        container=name,
        qos=qos,  # type: ignore[arg-type]
        cpu_request_milli=milli,
        cpu_limit_milli=milli if qos == "Guaranteed" else 0,
        memory_request=memory,
        memory_limit=memory,
        preferences=Preferences(**prefs),
    )


def policy(topology: Topology = MACHINE, **config: object) -> TopologyAwarePolicy:
    made = make_policy(topology, PolicyConfig(name="topology-aware", **config))
    assert isinstance(made, TopologyAwarePolicy)
    return made


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


# ----- capacity ------------------------------------------------------------------------------


def test_exclusive_cpus_never_shrink_shared_below_its_grants() -> None:
    p = policy(Topology.synthetic(nodes_per_die=2, cores_per_node=2))  # node0 0,1,4,5
    shared_key = req("b").key
    assert p.admit(req("b", 3000, "Burstable")).pool == "node0"
    # node0 must keep 3 CPUs: a 4-CPU container goes to node1, a 1-CPU one still fits node0.
    assert p.admit(req("g4", 4000)).pool == "node1"
    one = p.admit(req("g1", 1000))
    assert one.pool == "node0" and len(p.placement(shared_key).cpus) == 3
    with pytest.raises(PlacementError):
        p.admit(req("g2", 1000))  # the root keeps 3 for the Burstable container
    assert len(p.placement(req("b").key).cpus) == 3


TWO_CPUS = Topology.synthetic(cores_per_node=2, threads_per_core=1)  # CPUs 0 and 1, one node


def test_two_cpus_with_one_reserved_grant_the_other_as_static_does() -> None:
    # Issue 11, defect 7: the root used to keep its one unreserved CPU shared for BestEffort
    # containers, so no Guaranteed container ever got a CPU of its own here.
    static = make_policy(TWO_CPUS, PolicyConfig(name="static", reservedCPUs="0"))
    assert static.admit(req("g", 1000)).exclusive == CPUSet.of(1)
    p = policy(TWO_CPUS, reservedCPUs="0")
    g = p.admit(req("g", 1000, memory=GiB))
    assert (g.kind, g.cpus, g.exclusive, g.mems) == (
        "exclusive",
        CPUSet.of(1),
        CPUSet.of(1),
        CPUSet.of(0),
    )
    # With no shared CPU left, a BestEffort container runs on the reserved CPU (kubelet's and
    # static's shared pool includes it) and comes back to CPU 1 when it is free again.
    be = p.admit(req("be", 0, "BestEffort"))
    assert (be.kind, be.cpus, be.exclusive) == ("shared", CPUSet.of(0), CPUSet())
    # A CPU request needs a shared CPU that is not reserved: refused while CPU 1 is taken.
    with pytest.raises(PlacementError, match="0 CPUs free for exclusive use, 0m shared CPU"):
        p.admit(req("b", 100, "Burstable"))
    with pytest.raises(PlacementError):
        p.admit(req("g2", 1000))
    p.release(req("g").key)
    assert p.placement(req("be").key).cpus == CPUSet.of(1)
    # ... and while a BestEffort container runs on CPU 1, CPU 1 can still be handed out.
    assert p.admit(req("g3", 1000)).exclusive == CPUSet.of(1)
    assert p.placement(req("be").key).cpus == CPUSet.of(0)


def test_without_reserved_cpus_the_root_keeps_one_shared_cpu() -> None:
    p = policy(TWO_CPUS)
    assert p.admit(req("g", 1000)).exclusive == CPUSet.of(0)
    with pytest.raises(PlacementError, match="0 CPUs free for exclusive use"):
        p.admit(req("g2", 1000))
    assert p.admit(req("be", 0, "BestEffort")).cpus == CPUSet.of(1)


def test_a_big_container_spans_nodes_without_starving_a_nodes_shared_containers() -> None:
    topo = Topology.synthetic(nodes_per_die=2, cores_per_node=2)  # node0 0,1,4,5; node1 2,3,6,7
    p = policy(topo)
    p.admit(req("b", 2100, "Burstable"))  # node0: needs 3 of its 4 CPUs
    big = p.admit(req("big", 5000))  # fits no node: all of node1 and 1 CPU of node0
    assert big.pool == "root"
    assert big.exclusive == CPUSet.of(2, 3, 6, 7, 0)
    assert len(p.placement(req("b").key).cpus) == 3


def test_a_pool_with_whole_cores_wins_over_a_less_loaded_one() -> None:
    topo = Topology.synthetic(nodes_per_die=2, cores_per_node=2)  # node0 0,1,4,5; node1 2,3,6,7
    p = policy(topo)
    p.admit(req("a", 2000), keep=CPUSet.of(0, 1))  # node0 left with threads 4 and 5
    p.admit(req("b", 1000), keep=CPUSet.of(2))
    p.admit(req("c", 1000), keep=CPUSet.of(6))  # node1 left with the idle core 3,7
    # Both nodes have 2 free CPUs and node0 holds fewer containers, but only node1 has a core.
    assert p.admit(req("d", 2000)).exclusive == CPUSet.of(3, 7)


def test_shared_placements_follow_their_pool() -> None:
    p = policy(reservedCPUs="0")
    b = p.admit(req("b", 0, "BestEffort"))
    assert b.pool == "socket0/node1" and b.cpus == node(1)
    g = p.admit(req("g", 1000, pod="b"))  # same pod, fits node1: stays close
    assert g.pool == "socket0/node1"
    assert p.placement(req("b").key).cpus == node(1) - g.exclusive
    p.release(req("g", pod="b").key)
    assert p.placement(req("b").key).cpus == node(1)


def test_containers_of_a_pod_stay_together(topologies: dict[str, Topology]) -> None:
    topo = topologies["4-socket-server-nosnc"]
    p = policy(topo, reservedCPUs=2)
    first = p.admit(req("a", 2000, pod="app"))
    other = p.admit(req("x", 2000, pod="other"))
    assert first.pool != other.pool
    # Without the pod, this one would go to an idle socket; with it, next to its sibling.
    assert p.admit(req("b", 500, "Burstable", pod="app")).pool == first.pool


def test_refusal_says_what_was_asked_and_what_the_best_pool_had() -> None:
    topo = Topology.synthetic(sockets=2, cores_per_node=2)  # socket0 0,1,4,5; socket1 2,3,6,7
    p = policy(topo, reservedCPUs="0,4")
    assert p.admit(req("a", 4000)).exclusive == CPUSet.of(2, 3, 6, 7)
    before = p.placements()
    with pytest.raises(PlacementError) as err:
        p.admit(req("b", 3000, memory=GiB))
    assert err.value.reason == Reason.NO_ROOM
    # socket0 has 1 and 5 shared; with reserved CPUs the machine need not keep one of them.
    assert str(err.value) == (
        "pod ns/b container b: asked for 3 exclusive CPUs and 1Gi memory; no pool has room: "
        "the best, socket0, has 2 CPUs free for exclusive use, 2000m shared CPU and 16Gi "
        "memory free"
    )
    assert p.placements() == before and req("b").key not in p.admitted


# ----- keep, restore, reconfiguration -------------------------------------------------------


def test_keep_is_honoured_when_free_and_valid() -> None:
    p = policy(reservedCPUs="0")
    assert p.admit(req("a", 2000), keep=CPUSet.of(5, 13)).exclusive == CPUSet.of(5, 13)
    assert p.placement(req("a").key).pool == "socket1/node2"
    # Taken, reserved or isolated CPUs are not kept.
    assert p.admit(req("b", 2000), keep=CPUSet.of(5, 13)).exclusive != CPUSet.of(5, 13)
    assert 0 not in p.admit(req("c", 2000), keep=CPUSet.of(0, 8)).exclusive


def test_a_shared_container_keeps_its_pool_but_not_kubelets_default() -> None:
    p = policy(reservedCPUs="0")
    assert p.admit(req("b", 100, "Burstable"), keep=node(3)).pool == "socket1/node3"
    # Every CPU, reserved ones included: what kubelet gives before the enforcer pins anything.
    assert p.admit(req("c", 100, "Burstable"), keep=MACHINE.online).pool == "socket0/node1"


def test_readmitting_a_key_keeps_its_place() -> None:
    p = policy(reservedCPUs="0")
    first = p.admit(req("g", 2000))
    p.admit(req("other", 2000))
    assert p.admit(req("g", 2000)) == first


def test_saved_state_restores_identically() -> None:
    p = policy(reservedCPUs="0")
    for i, (milli, qos) in enumerate(
        [
            (1000, "Guaranteed"),
            (2500, "Guaranteed"),
            (500, "Burstable"),
            (0, "BestEffort"),
            (4000, "Guaranteed"),
            (200, "Guaranteed"),
        ]
    ):
        p.admit(req(f"p{i}", milli, qos, memory=GiB))
    saved = json.loads(json.dumps(p.to_state()))
    restored = policy(reservedCPUs="0")
    assert restored.restore(saved) == []
    assert restored.placements() == p.placements()
    assert restored.pools() == p.pools()
    assert restored.to_state() == p.to_state()


def test_reconfiguration_keeps_what_fits_and_names_what_does_not() -> None:
    p = policy(reservedCPUs="0")
    stay = p.admit(req("stay", 2000))  # node1: 2,10
    p.admit(req("hop", 1000), keep=CPUSet.of(8))
    shared = p.admit(req("b", 100, "Burstable"))  # node2, the least loaded
    big = p.admit(req("big", 6000))  # no node has 6: socket1, leaving node2 a CPU for "b"
    move = p.admit(req("move", 2000), keep=CPUSet.of(1, 9))
    assert (shared.pool, big.pool, move.exclusive) == ("socket1/node2", "socket1", CPUSet.of(1, 9))
    # Reserve node0 and CPU 3: "hop" and "move" lose their CPUs. Left for exclusive use: 11 in
    # node1 and one CPU of socket1 (its other free CPU is kept for "b"), minus the one the
    # machine keeps shared: "hop" (1 CPU) moves, then "move" (2 CPUs) fits nowhere.
    changed = policy(reservedCPUs="0-1,3,8-9")
    problems = changed.restore(json.loads(json.dumps(p.to_state())))
    assert changed.placement(req("stay").key) == stay
    assert changed.placement(req("big").key) == big
    assert changed.placement(req("b").key).pool == shared.pool
    hop = changed.placement(req("hop").key)
    assert hop.kind == "exclusive" and len(hop.exclusive) == 1 and 8 not in hop.exclusive
    assert len(problems) == 1 and problems[0].startswith("ns/move/move: pod ns/move container ")
    # The saved order is kept, minus what could not be placed.
    assert list(changed.admitted) == [k for k in p.admitted if k != req("move").key]


def test_status_prints_the_pool_tree(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    p = policy(reservedCPUs="0")
    p.admit(req("g", 2000))
    config = PolicyConfig(name="topology-aware", reservedCPUs="0")
    StateStore(tmp_path).save(
        {
            "topology": MACHINE.to_dict(),
            "policyConfig": config.model_dump(),
            "policy": p.to_state(),
            "containers": [],
        }
    )
    assert status(str(tmp_path)) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.lstrip().startswith("socket0/")]
    # POOL CPUS SHARED EXCLUSIVE FREE SHARED-REQ CONTAINERS MEMS
    assert rows[0][:8] == ["socket0/node0", "4", "3", "0", "3", "0m", "0", "0"]
    assert rows[1][:8] == ["socket0/node1", "4", "2", "2", "2", "0m", "1", "1"]
    assert "core 0: cpu0=reserved  cpu8=shared" in out


def test_views_report_pools() -> None:
    p = policy(reservedCPUs="0")
    p.admit(req("g", 2000, memory=2 * GiB))
    p.admit(req("b", 1500, "Burstable"))
    views = {v.name: v for v in p.pools()}
    node1 = views["socket0/node1"]
    assert (len(node1.cpus), node1.exclusive, node1.containers) == (4, CPUSet.of(2, 10), 1)
    assert node1.memory_used == 2 * GiB and node1.memory_capacity == 16 * GiB
    assert views["root"].containers == 2 and views["root"].shared_milli == 1500
    # root: 15 usable CPUs, 2 exclusive, 2 kept for the Burstable one.
    assert views["root"].free == 15 - 2 - 2
