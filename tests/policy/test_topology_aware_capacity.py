"""The topology-aware policy: capacity (grants, exclusive CPUs, memory), keeping and restoring
places, reconfiguration and what `status` shows. The synthetic MACHINE is described in
`tests/policy/tasupport.py`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from enforcer.commands.status import status
from enforcer.policy import PlacementError, make_policy
from enforcer.refusal import Reason
from enforcer.state import StateStore
from enforcer.topology import CPUSet, Topology
from resource_contract.policy_config import PolicyConfig
from tests.policy.tasupport import MACHINE, GiB, node, policy, req

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
