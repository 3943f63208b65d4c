"""Discovery on the real sysfs snapshots, and the reader's handling of missing and bad files.

The expected values were read off the snapshot files themselves (cpu/online, cpu/isolated,
cpuN/topology/*, cpuN/cache/index3/*, node/nodeN/{cpulist,meminfo,distance}).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from enforcer.sysfs import read_topology
from enforcer.topology import CPUSet, Topology, TopologyError


@dataclass(frozen=True)
class Facts:
    sockets: int
    nodes_of_socket: dict[int, list[int]]
    memory_only: list[int]
    cores: int
    threads: int
    isolated: str
    l3_groups: dict[int, str]
    mem_kb: dict[int, int]  # MemTotal of every node


FACTS: dict[str, Facts] = {
    "4-socket-server-nosnc": Facts(
        sockets=4,
        nodes_of_socket={0: [0], 1: [1], 2: [2], 3: [3]},
        memory_only=[],
        cores=72,
        threads=144,
        isolated="",
        l3_groups={0: "0-17,72-89", 1: "18-35,90-107", 2: "36-53,108-125", 3: "54-71,126-143"},
        mem_kb={0: 196726504, 1: 198172236, 2: 198137748, 3: 198170672},
    ),
    "server": Facts(
        sockets=2,
        nodes_of_socket={0: [0, 2], 1: [1, 3]},
        memory_only=[4, 5],
        cores=56,
        threads=112,
        isolated="4-7,60-63",
        l3_groups={
            0: ",".join(map(str, range(0, 112, 2))),
            1: ",".join(map(str, range(1, 112, 2))),
        },
        mem_kb={
            0: 32372996,
            1: 33023416,
            2: 33023424,
            3: 33018848,
            4: 130023424,
            5: 130023424,
        },
    ),
    "desktop": Facts(
        sockets=1,
        nodes_of_socket={0: [0]},
        memory_only=[],
        cores=10,
        threads=20,
        isolated="",
        l3_groups={0: "0-19"},
        mem_kb={0: 65621548},
    ),
    "2-socket-4-node-40-core": Facts(
        sockets=2,
        nodes_of_socket={0: [0, 1], 1: [2, 3]},
        memory_only=[],
        cores=40,
        threads=80,
        isolated="",
        l3_groups={0: "0-19,40-59", 1: "20-39,60-79"},
        mem_kb={0: 48005604, 1: 49507804, 2: 49540688, 3: 49539172},
    ),
    "sample1": Facts(
        sockets=1,
        nodes_of_socket={0: [0]},
        memory_only=[],
        cores=12,  # hybrid: 4 cores with 2 threads (0-7), 8 single-thread cores (8-15)
        threads=16,
        isolated="",
        l3_groups={0: "0-15"},
        mem_kb={0: 40645580},
    ),
    "sample2": Facts(
        sockets=2,
        nodes_of_socket={0: [0, 2], 1: [1, 3]},
        memory_only=[4, 5, 6, 7],
        cores=56,
        threads=112,
        isolated="4-7,60-63",
        l3_groups={
            0: ",".join(map(str, range(0, 112, 2))),
            1: ",".join(map(str, range(1, 112, 2))),
        },
        mem_kb={
            0: 32404120,
            1: 33022772,
            2: 33022780,
            3: 33002800,
            4: 130023424,
            5: 130023424,
            6: 130023424,
            7: 130023424,
        },
    ),
}

DISTANCES: dict[str, list[list[int]]] = {
    "4-socket-server-nosnc": [
        [10, 21, 21, 21],
        [21, 10, 21, 21],
        [21, 21, 10, 21],
        [21, 21, 21, 10],
    ],
    "server": [
        [10, 21, 11, 21, 17, 28],
        [21, 10, 21, 11, 28, 28],
        [11, 21, 10, 21, 28, 17],
        [21, 11, 21, 10, 28, 28],
        [17, 28, 28, 28, 10, 28],
        [28, 28, 17, 28, 28, 10],
    ],
    "desktop": [[10]],
    "2-socket-4-node-40-core": [
        [10, 11, 21, 21],
        [11, 10, 21, 21],
        [21, 21, 10, 11],
        [21, 21, 11, 10],
    ],
    "sample1": [[10]],
    "sample2": [
        [10, 21, 11, 21, 17, 28, 28, 28],
        [21, 10, 21, 11, 28, 28, 17, 28],
        [11, 21, 10, 21, 28, 17, 28, 28],
        [21, 11, 21, 10, 28, 28, 28, 17],
        [17, 28, 28, 28, 10, 28, 28, 28],
        [28, 28, 17, 28, 28, 10, 28, 28],
        [28, 17, 28, 28, 28, 28, 10, 28],
        [28, 28, 28, 17, 28, 28, 28, 10],
    ],
}


@pytest.mark.parametrize("name", sorted(FACTS))
def test_discovery_facts(topologies: dict[str, Topology], name: str) -> None:
    topo, facts = topologies[name], FACTS[name]
    assert topo.online == CPUSet(range(facts.threads))
    assert len(topo.cpus) == facts.threads
    assert topo.sockets() == list(range(facts.sockets))
    for socket, nodes in facts.nodes_of_socket.items():
        assert topo.nodes_of_socket(socket) == nodes
        # no snapshot reports dies other than 0
        assert topo.dies(socket) == [0]
        assert topo.cpus_of_die(socket, 0) == topo.cpus_of_socket(socket)
        assert topo.cpus_of_socket(socket) == CPUSet().union(*map(topo.cpus_of_node, nodes))
    cpu_nodes = sorted(n for nodes in facts.nodes_of_socket.values() for n in nodes)
    assert topo.cpu_nodes() == cpu_nodes
    assert topo.memory_only_nodes() == facts.memory_only
    assert topo.node_ids() == sorted(cpu_nodes + facts.memory_only)
    assert len(topo.cores()) == facts.cores
    assert str(topo.isolated) == facts.isolated
    assert {g: str(topo.cpus_of_l3(g)) for g in topo.l3_groups()} == facts.l3_groups
    assert {n.id: n.memory_bytes for n in topo.nodes.values()} == {
        n: kb * 1024 for n, kb in facts.mem_kb.items()
    }
    assert all(n.memory_bytes > 0 for n in topo.nodes.values())


@pytest.mark.parametrize("name", sorted(DISTANCES))
def test_node_distances(topologies: dict[str, Topology], name: str) -> None:
    topo = topologies[name]
    ids = topo.node_ids()
    assert [[topo.distance(a, b) for b in ids] for a in ids] == DISTANCES[name]


@pytest.mark.parametrize("name", sorted(FACTS))
def test_structural_invariants(topologies: dict[str, Topology], name: str) -> None:
    topo = topologies[name]
    cores = topo.cores()
    # cores partition the CPUs, each core lies in one node, one L3 group, one socket
    assert sum(len(c) for c in cores) == len(topo.online)
    assert CPUSet().union(*cores) == topo.online
    for core in cores:
        assert len(topo.nodes_of_cpus(core)) == 1
        assert len({topo.cpus[c].l3 for c in core}) == 1
        assert len(topo.sockets_of_cpus(core)) == 1
        assert all(topo.siblings(c) == core and topo.cpus[c].core == min(core) for c in core)
    assert CPUSet().union(*(topo.cpus_of_node(n) for n in topo.node_ids())) == topo.online


def test_thread_counts(topologies: dict[str, Topology]) -> None:
    def shape(name: str) -> dict[int, int]:
        sizes: dict[int, int] = {}
        for core in topologies[name].cores():
            sizes[len(core)] = sizes.get(len(core), 0) + 1
        return sizes

    assert shape("sample1") == {2: 4, 1: 8}
    assert topologies["sample1"].cores()[:5] == [
        CPUSet.of(0, 1),
        *[CPUSet.of(i, i + 1) for i in (2, 4, 6)],
        CPUSet.of(8),
    ]
    assert shape("desktop") == {2: 10}
    assert topologies["desktop"].siblings(3) == CPUSet.of(3, 13)
    assert shape("server") == {2: 56}
    assert topologies["server"].siblings(0) == CPUSet.of(0, 56)
    assert shape("4-socket-server-nosnc") == {2: 72}
    assert topologies["4-socket-server-nosnc"].siblings(17) == CPUSet.of(17, 89)
    assert shape("2-socket-4-node-40-core") == {2: 40}


def test_node_cpus(topologies: dict[str, Topology]) -> None:
    t = topologies["2-socket-4-node-40-core"]
    assert str(t.cpus_of_node(0)) == "0-2,5-6,10-12,15-16,40-42,45-46,50-52,55-56"
    assert str(t.cpus_of_node(3)) == "23-24,27-29,33-34,37-39,63-64,67-69,73-74,77-79"
    s = topologies["server"]
    assert s.cpus_of_node(1) == CPUSet(range(1, 112, 4))
    assert s.cpus_of_node(4) == CPUSet()
    assert s.nodes[4].memory_only and not s.nodes[0].memory_only
    # the isolated CPUs are one core in each CPU node
    assert s.nodes_of_cpus(s.isolated) == {0, 1, 2, 3}
    assert s.siblings(4) == CPUSet.of(4, 60)


def test_memory_only_nodes_attach_to_the_nearest_cpu_node(topologies: dict[str, Topology]) -> None:
    server, sample2 = topologies["server"], topologies["sample2"]
    assert server.nearest_memory_only_nodes([0]) == {4}
    assert server.nearest_memory_only_nodes([2]) == {5}
    assert server.nearest_memory_only_nodes([1, 3]) == set()
    assert server.nearest_memory_only_nodes([0, 1, 2, 3]) == {4, 5}
    assert {n: sample2.nearest_memory_only_nodes([n]) for n in range(4)} == {
        0: {4},
        1: {6},
        2: {5},
        3: {7},
    }
    assert str(sample2.memory_nodes_of_cpus(CPUSet.of(0, 1))) == "0-1,4,6"
    assert str(sample2.memory_nodes_of_cpus(CPUSet.of(0, 1), memory_only=False)) == "0-1"
    assert topologies["desktop"].nearest_memory_only_nodes([0]) == set()


@pytest.mark.parametrize("name", sorted(FACTS))
def test_dict_round_trip(topologies: dict[str, Topology], name: str) -> None:
    topo = topologies[name]
    stored = json.loads(json.dumps(topo.to_dict()))
    assert Topology.from_dict(stored) == topo


# ----- missing optional files ------------------------------------------------------------------


def _copy(snapshot_roots: dict[str, Path], name: str, tmp_path: Path) -> Path:
    root = tmp_path / name
    shutil.copytree(snapshot_roots[name], root, symlinks=True)
    return root


def _cpu_dirs(root: Path) -> list[Path]:
    return sorted((root / "devices/system/cpu").glob("cpu[0-9]*"))


def test_missing_die_id(
    snapshot_roots: dict[str, Path], topologies: dict[str, Topology], tmp_path: Path
) -> None:
    root = _copy(snapshot_roots, "2-socket-4-node-40-core", tmp_path)
    for cpu in _cpu_dirs(root):
        (cpu / "topology/die_id").unlink()
        (cpu / "topology/die_cpus_list").unlink(missing_ok=True)
    topo = read_topology(root)
    assert topo == topologies["2-socket-4-node-40-core"]
    assert topo.dies(1) == [0]


def test_missing_sibling_lists_fall_back_on_core_id(
    snapshot_roots: dict[str, Path], topologies: dict[str, Topology], tmp_path: Path
) -> None:
    root = _copy(snapshot_roots, "sample1", tmp_path)
    for cpu in _cpu_dirs(root):
        (cpu / "topology/thread_siblings_list").unlink()
        (cpu / "topology/core_cpus_list").unlink(missing_ok=True)
    assert read_topology(root) == topologies["sample1"]


def test_missing_cache_folders(snapshot_roots: dict[str, Path], tmp_path: Path) -> None:
    root = _copy(snapshot_roots, "server", tmp_path)
    for cpu in _cpu_dirs(root):
        shutil.rmtree(cpu / "cache")
    topo = read_topology(root)
    assert topo.l3_groups() == []
    assert all(c.l3 is None for c in topo.cpus.values())
    assert len(topo.cores()) == 56 and topo.memory_only_nodes() == [4, 5]


def test_missing_cache_id_groups_by_shared_cpu_list(
    snapshot_roots: dict[str, Path], topologies: dict[str, Topology], tmp_path: Path
) -> None:
    root = _copy(snapshot_roots, "4-socket-server-nosnc", tmp_path)
    for cpu in _cpu_dirs(root):
        for cache_id in cpu.glob("cache/index*/id"):
            cache_id.unlink()
    topo = read_topology(root)
    # groups are numbered by their lowest CPU, which here matches the kernel's ids
    assert topo == topologies["4-socket-server-nosnc"]


def test_missing_node_folder_gives_one_node(
    snapshot_roots: dict[str, Path], tmp_path: Path
) -> None:
    root = _copy(snapshot_roots, "server", tmp_path)
    shutil.rmtree(root / "devices/system/node")
    topo = read_topology(root)
    assert topo.node_ids() == [0]
    assert topo.cpus_of_node(0) == CPUSet(range(112))
    assert topo.sockets() == [0, 1]
    assert topo.nodes[0].memory_bytes == 0 and dict(topo.nodes[0].distances) == {}


def test_missing_node_online_uses_node_folders(
    snapshot_roots: dict[str, Path], topologies: dict[str, Topology], tmp_path: Path
) -> None:
    root = _copy(snapshot_roots, "sample2", tmp_path)
    (root / "devices/system/node/online").unlink()
    assert read_topology(root) == topologies["sample2"]


def test_missing_isolated_meminfo_distance_cpulist(
    snapshot_roots: dict[str, Path], topologies: dict[str, Topology], tmp_path: Path
) -> None:
    root = _copy(snapshot_roots, "server", tmp_path)
    (root / "devices/system/cpu/isolated").unlink()
    node0 = root / "devices/system/node/node0"
    for name in ("meminfo", "distance", "cpulist"):
        (node0 / name).unlink()
    topo = read_topology(root)
    assert topo.isolated == CPUSet()
    assert topo.nodes[0].memory_bytes == 0
    assert dict(topo.nodes[0].distances) == {}
    # cpulist gone: the cpuN links in the node folder still say which CPUs it has
    assert topo.cpus_of_node(0) == topologies["server"].cpus_of_node(0)


def test_offline_cpus_are_skipped(snapshot_roots: dict[str, Path], tmp_path: Path) -> None:
    root = _copy(snapshot_roots, "desktop", tmp_path)
    cpu = root / "devices/system/cpu"
    (cpu / "online").write_text("0-12,14-19\n")  # CPU 13 offline (sibling of 3) ...
    shutil.rmtree(cpu / "cpu13")
    shutil.rmtree(cpu / "cpu19" / "topology")  # ... and 19 listed online but without topology
    topo = read_topology(root)
    assert topo.online == CPUSet.parse("0-12,14-18")
    assert topo.siblings(3) == CPUSet.of(3)
    assert topo.siblings(9) == CPUSet.of(9)
    assert topo.cpus_of_node(0) == topo.online
    assert len(topo.cores()) == 10


# ----- malformed and missing required files ----------------------------------------------------


@pytest.mark.parametrize(
    ("relpath", "content"),
    [
        ("cpu/cpu3/topology/core_id", "x\n"),
        ("cpu/cpu3/topology/physical_package_id", "zero"),
        ("cpu/cpu3/topology/die_id", "1.5"),
        ("cpu/cpu3/topology/thread_siblings_list", "3-a"),
        ("cpu/cpu3/cache/index3/level", "three"),
        ("cpu/cpu3/cache/index3/shared_cpu_list", "0-15,"),
        ("cpu/online", "0-15x"),
        ("cpu/isolated", "junk"),
        ("node/online", "0-"),
        ("node/node0/cpulist", "zero"),
        ("node/node0/meminfo", "Node 0 MemTotal: lots"),
        ("node/node0/distance", "10 20"),
        ("node/node0/distance", "ten"),
    ],
)
def test_malformed_file_names_file_and_content(
    snapshot_roots: dict[str, Path], tmp_path: Path, relpath: str, content: str
) -> None:
    root = _copy(snapshot_roots, "sample1", tmp_path)
    path = root / "devices/system" / relpath
    path.write_text(content)
    with pytest.raises(TopologyError) as err:
        read_topology(root)
    message = str(err.value)
    assert str(path) in message
    assert repr(content.strip()) in message


@pytest.mark.parametrize(
    "relpath", ["cpu/online", "cpu/cpu2/topology/core_id", "cpu/cpu2/topology/physical_package_id"]
)
def test_missing_required_file(
    snapshot_roots: dict[str, Path], tmp_path: Path, relpath: str
) -> None:
    root = _copy(snapshot_roots, "sample1", tmp_path)
    path = root / "devices/system" / relpath
    path.unlink()
    with pytest.raises(TopologyError, match="missing") as err:
        read_topology(root)
    assert str(path) in str(err.value)


def test_wrong_root(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match=str(tmp_path)):
        read_topology(tmp_path)
