"""The I/O-free topology model: synthetic shapes, queries, storage round trip, validation."""

from __future__ import annotations

import copy
import json
import pickle

import pytest

from enforcer.topology import CPUInfo, CPUSet, NumaNode, Topology, TopologyError


def test_synthetic_numbering_and_queries() -> None:
    topo = Topology.synthetic(
        sockets=2, dies_per_socket=2, nodes_per_die=1, cores_per_node=2, threads_per_core=2
    )
    # 8 cores; first threads are CPUs 0-7, second threads 8-15
    assert topo.online == CPUSet(range(16))
    assert topo.siblings(3) == CPUSet.of(3, 11)
    assert topo.cpus[11].core == 3
    assert topo.sockets() == [0, 1]
    assert topo.dies(0) == [0, 1] and topo.dies(5) == []
    assert topo.cpus_of_socket(1) == CPUSet.parse("4-7,12-15")
    assert topo.cpus_of_die(1, 0) == CPUSet.parse("4-5,12-13")
    assert topo.nodes_of_socket(1) == [2, 3]
    assert topo.nodes_of_die(1, 1) == [3]
    assert topo.cpus_of_node(3) == CPUSet.parse("6-7,14-15")
    assert topo.l3_groups() == [0, 1, 2, 3]  # one per die by default
    assert topo.cpus_of_l3(2) == topo.cpus_of_die(1, 0)
    assert topo.cores()[0] == CPUSet.of(0, 8) and len(topo.cores()) == 8
    assert topo.cpus_of_core(3) == CPUSet.of(3, 11) and topo.cpus_of_core(11) == CPUSet()
    assert topo.nodes_of_cpus(CPUSet.of(0, 15)) == {0, 3}
    assert topo.sockets_of_cpus([0, 15]) == {0, 1}
    assert [topo.distance(0, n) for n in topo.node_ids()] == [
        10,
        12,
        21,
        21,
    ]  # same die 11, same socket 12
    assert set(topo.units("die")) == {(0, 0), (0, 1), (1, 0), (1, 1)}
    assert "2 sockets, 4 dies" in topo.describe()


def test_synthetic_memory_only_and_isolated() -> None:
    topo = Topology.synthetic(sockets=2, cores_per_node=2, memory_only_nodes=2, isolated="1,5")
    assert topo.cpu_nodes() == [0, 1]
    assert topo.memory_only_nodes() == [2, 3]
    assert topo.nodes[2].memory_only and topo.cpus_of_node(2) == CPUSet()
    assert topo.nearest_memory_only_nodes([1]) == {3}
    assert topo.memory_nodes_of_cpus(CPUSet.of(0)) == CPUSet.of(0, 2)
    assert topo.isolated == CPUSet.of(1, 5)
    assert topo.cpus[5].isolated and not topo.cpus[0].isolated
    with pytest.raises(ValueError, match="99"):
        Topology.synthetic(isolated=[99])
    with pytest.raises(ValueError):
        Topology.synthetic(cores_per_node=0)


def test_without_l3() -> None:
    topo = Topology.synthetic(l3="none")
    assert topo.l3_groups() == [] and topo.cpus_of_l3(0) == CPUSet()


@pytest.mark.parametrize(
    "shape",
    [
        {},
        {"sockets": 3, "nodes_per_die": 2, "threads_per_core": 1, "l3": "node"},
        {"dies_per_socket": 2, "threads_per_core": 4, "memory_only_nodes": 3, "isolated": "0-3"},
    ],
)
def test_round_trip(shape: dict) -> None:
    topo = Topology.synthetic(**shape)
    data = json.loads(json.dumps(topo.to_dict()))
    again = Topology.from_dict(data)
    assert again == topo
    assert again.to_dict() == topo.to_dict()
    assert pickle.loads(pickle.dumps(topo)) == topo
    assert copy.deepcopy(topo) == topo


def test_stored_form_is_readable() -> None:
    data = Topology.synthetic(cores_per_node=1, threads_per_core=2).to_dict()
    assert data["cpus"][1] == {
        "id": 1,
        "socket": 0,
        "die": 0,
        "node": 0,
        "core": 0,
        "l3": 0,
        "isolated": False,
    }
    assert data["nodes"] == [
        {"id": 0, "cpus": "0-1", "memoryBytes": 16 << 30, "distances": {"0": 10}}
    ]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.pop("cpus"), "cpus"),
        (lambda d: d["cpus"][0].pop("socket"), "socket"),
        (lambda d: d["cpus"][0].update(isolated="yes"), "yes"),
        (lambda d: d["nodes"][0].update(cpus="0-x"), "0-x"),
        (lambda d: d["cpus"][1].update(node=7), "unknown"),
        (lambda d: d["cpus"][0].update(core=1), "names core 1"),
        (lambda d: d["nodes"][0].update(cpus="0"), "node 0 lists CPUs 0"),
    ],
)
def test_malformed_stored_topology(mutate, message: str) -> None:
    data = Topology.synthetic(cores_per_node=1, threads_per_core=2).to_dict()
    mutate(data)
    with pytest.raises(TopologyError, match=message):
        Topology.from_dict(data)


def test_inconsistent_core_key_is_refused() -> None:
    cpus = {0: CPUInfo(0, 0, 0, 0, core=0), 1: CPUInfo(1, 0, 0, 0, core=2)}
    with pytest.raises(TopologyError, match="core 2"):
        Topology(cpus=cpus, nodes={0: NumaNode(0, CPUSet.of(0, 1))})


def test_numa_node() -> None:
    node = NumaNode(4, CPUSet(), 1 << 30, {5: 28, 4: 10})
    assert node.memory_only
    assert node.distance(5) == 28 and node.distance(9) is None
    assert list(node.distances) == [4, 5]
    assert hash(node) == hash(NumaNode(4, CPUSet(), 1 << 30, {4: 10}))
