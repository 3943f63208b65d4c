"""The shared CPU allocator, on the real snapshots and on synthetic shapes."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from enforcer.cpuallocator import NotEnoughCPUs, allocate_cpus, release_cpus
from enforcer.topology import CPUSet, Topology

SNAPSHOTS = [
    "4-socket-server-nosnc",
    "server",
    "desktop",
    "2-socket-4-node-40-core",
    "sample1",
    "sample2",
]


def whole_cores(topo: Topology, cpus: CPUSet) -> bool:
    """Every core that `cpus` touches is entirely in `cpus`."""
    return all(topo.siblings(c) <= cpus for c in cpus)


def idle_core_capacity(topo: Topology, free: CPUSet, n: int) -> int:
    """How many of n CPUs whole idle cores of `free` can supply (biggest cores first)."""
    total = 0
    for size in sorted((len(c) for c in topo.cores() if c <= free), reverse=True):
        if total + size <= n:
            total += size
    return total


def split_cpus(topo: Topology, cpus: CPUSet) -> int:
    """CPUs of `cpus` whose core is not entirely in `cpus`."""
    return sum(1 for c in cpus if not topo.siblings(c) <= cpus)


# ----- examples on the real machines --------------------------------------------------------


@pytest.mark.parametrize("name", ["4-socket-server-nosnc", "server", "2-socket-4-node-40-core"])
def test_request_of_a_socket_gets_a_whole_socket(
    topologies: dict[str, Topology], name: str
) -> None:
    topo = topologies[name]
    size = len(topo.cpus_of_socket(0))
    assert allocate_cpus(topo, topo.online, size) == topo.cpus_of_socket(0)
    # socket 0 is in use: the next idle socket, whole, not a mix of the two
    busy = topo.online - CPUSet.of(0)
    assert allocate_cpus(topo, busy, size) == topo.cpus_of_socket(1)


def test_socket_plus_a_few(topologies: dict[str, Topology]) -> None:
    topo = topologies["4-socket-server-nosnc"]
    got = allocate_cpus(topo, topo.online, 36 + 4)
    assert topo.cpus_of_socket(0) <= got
    rest = got - topo.cpus_of_socket(0)
    assert len(rest) == 4 and whole_cores(topo, rest) and len(topo.nodes_of_cpus(rest)) == 1


@pytest.mark.parametrize(
    ("name", "node_size"), [("server", 28), ("2-socket-4-node-40-core", 20), ("sample2", 28)]
)
def test_request_of_a_node_gets_a_whole_node(
    topologies: dict[str, Topology], name: str, node_size: int
) -> None:
    topo = topologies[name]
    assert allocate_cpus(topo, topo.online, node_size) == topo.cpus_of_node(0)
    busy = topo.online - CPUSet.of(0)
    got = allocate_cpus(topo, busy, node_size)
    assert got in [topo.cpus_of_node(n) for n in topo.cpu_nodes()]


def test_node_plus_a_few_stays_in_the_socket(topologies: dict[str, Topology]) -> None:
    topo = topologies["2-socket-4-node-40-core"]
    got = allocate_cpus(topo, topo.online, 24)
    assert topo.sockets_of_cpus(got) == {0}
    assert topo.cpus_of_node(0) <= got and whole_cores(topo, got)


@pytest.mark.parametrize("name", SNAPSHOTS)
@pytest.mark.parametrize("count", [2, 4, 6, 8])
def test_even_requests_get_whole_cores_in_one_node(
    topologies: dict[str, Topology], name: str, count: int
) -> None:
    topo = topologies[name]
    got = allocate_cpus(topo, topo.online, count)
    assert len(got) == count
    assert whole_cores(topo, got)
    assert len(topo.nodes_of_cpus(got)) == 1


@pytest.mark.parametrize(
    ("name", "busy", "expected"),
    [
        ("desktop", 0, 10),
        ("server", 5, 61),
        ("4-socket-server-nosnc", 80, 8),
        ("2-socket-4-node-40-core", 77, 37),
    ],
)
def test_one_cpu_packs_onto_a_half_used_core(
    topologies: dict[str, Topology], name: str, busy: int, expected: int
) -> None:
    topo = topologies[name]
    assert allocate_cpus(topo, topo.online - CPUSet.of(busy), 1) == CPUSet.of(expected)


def test_two_cpus_are_one_whole_core(topologies: dict[str, Topology]) -> None:
    server = topologies["server"]
    assert allocate_cpus(server, server.online, 2) == CPUSet.of(0, 56)
    # half-used cores are left for odd requests: 2 CPUs still come as one whole core
    free = server.online - CPUSet.of(0, 1, 2)
    got = allocate_cpus(server, free, 2)
    assert len(got) == 2 and whole_cores(server, got)
    assert allocate_cpus(topologies["desktop"], topologies["desktop"].online, 2) == CPUSet.of(0, 10)


def test_odd_request_uses_a_half_used_core_before_breaking_one(
    topologies: dict[str, Topology],
) -> None:
    topo = topologies["desktop"]
    free = topo.online - CPUSet.of(7)  # core 7,17 is half used
    got = allocate_cpus(topo, free, 5)
    assert 17 in got
    assert split_cpus(topo, got) == 1


def test_hybrid_cores(topologies: dict[str, Topology]) -> None:
    topo = topologies["sample1"]  # 4 two-thread cores (0-7), 8 one-thread cores (8-15)
    assert allocate_cpus(topo, topo.online, 2) == CPUSet.of(0, 1)
    one = allocate_cpus(topo, topo.online, 1)
    assert one <= CPUSet(range(8, 16))  # a whole small core, not half of a big one
    assert whole_cores(topo, allocate_cpus(topo, topo.online, 5))


def test_isolated_cpus_are_preferred_when_they_suffice(topologies: dict[str, Topology]) -> None:
    topo = topologies["server"]
    assert allocate_cpus(topo, topo.online, 1, prefer=topo.isolated) <= topo.isolated
    assert allocate_cpus(topo, topo.online, 2, prefer=topo.isolated) == CPUSet.of(4, 60)
    assert allocate_cpus(topo, topo.online, 8, prefer=topo.isolated) == topo.isolated
    # not enough isolated CPUs for the whole request: ignore the preference entirely
    got = allocate_cpus(topo, topo.online - topo.isolated, 9, prefer=topo.isolated)
    assert not got & topo.isolated and len(topo.nodes_of_cpus(got)) == 1


def test_determinism(topologies: dict[str, Topology]) -> None:
    topo = topologies["sample2"]
    free = topo.online - CPUSet.parse("0-9,33,70-79")
    results = {allocate_cpus(topo, free, 13) for _ in range(5)}
    results.add(allocate_cpus(topo, sorted(free, reverse=True), 13))
    assert len(results) == 1


def test_errors(topologies: dict[str, Topology]) -> None:
    topo = topologies["sample1"]
    with pytest.raises(NotEnoughCPUs, match=r"^asked for 4 exclusive CPUs, 2 free: 3,5$"):
        allocate_cpus(topo, CPUSet.of(3, 5), 4)
    with pytest.raises(NotEnoughCPUs, match=r"asked for 1 shared CPU, 0 free: none"):
        allocate_cpus(topo, CPUSet(), 1, kind="shared")
    with pytest.raises(ValueError, match="negative"):
        allocate_cpus(topo, topo.online, -1)
    with pytest.raises(ValueError, match="16-17"):
        allocate_cpus(topo, CPUSet.parse("0-17"), 1)
    assert allocate_cpus(topo, topo.online, 0) == CPUSet()
    assert allocate_cpus(topo, topo.online, 16) == topo.online


def test_release_gives_back_the_stragglers(topologies: dict[str, Topology]) -> None:
    topo = topologies["4-socket-server-nosnc"]
    held = CPUSet.parse("0-3,20,72-75")  # four cores of node 0 and a lone CPU of node 1
    released = release_cpus(topo, held, 3)
    assert 20 in released and len(released) == 3
    kept = held - released
    assert topo.nodes_of_cpus(kept) == {0} and whole_cores(topo, kept)
    assert release_cpus(topo, held, 0) == CPUSet()
    with pytest.raises(ValueError):
        release_cpus(topo, held, 10)


# ----- synthetic shapes -----------------------------------------------------------------------


def test_multi_die_sockets() -> None:
    topo = Topology.synthetic(sockets=2, dies_per_socket=2, nodes_per_die=2, cores_per_node=4)
    assert topo.dies(1) == [0, 1]
    die = topo.cpus_of_die(1, 1)
    assert len(die) == 16 and topo.nodes_of_die(1, 1) == [6, 7]
    # a die-sized request is one die; with die (0, 0) broken, the next die, whole
    assert allocate_cpus(topo, topo.online, 16) == topo.cpus_of_die(0, 0)
    assert allocate_cpus(topo, topo.online - CPUSet.of(0), 16) == topo.cpus_of_die(0, 1)
    # bigger than a die, smaller than a socket: stays in one socket
    got = allocate_cpus(topo, topo.online, 24)
    assert len(topo.sockets_of_cpus(got)) == 1 and whole_cores(topo, got)
    assert topo.cpus_of_die(0, 0) <= got


def test_l3_groups_smaller_than_nodes() -> None:
    # like an AMD part: several L3 groups (here one per node of a 2-node die)
    topo = Topology.synthetic(sockets=1, nodes_per_die=2, cores_per_node=4, l3="node")
    assert len(topo.l3_groups()) == 2
    got = allocate_cpus(topo, topo.online - CPUSet.of(0), 6)
    assert len({topo.cpus[c].l3 for c in got}) == 1


def test_smt4_and_no_smt() -> None:
    smt4 = Topology.synthetic(cores_per_node=4, threads_per_core=4)
    assert allocate_cpus(smt4, smt4.online, 4) == smt4.siblings(0)
    # two CPUs cannot be a whole core: they are two threads of the same core
    two = allocate_cpus(smt4, smt4.online, 2)
    assert len({smt4.cpus[c].core for c in two}) == 1
    nosmt = Topology.synthetic(sockets=2, cores_per_node=8, threads_per_core=1)
    assert allocate_cpus(nosmt, nosmt.online, 8) == nosmt.cpus_of_socket(0)


def test_reserved_cpus_keep_socket_zero_from_counting_as_idle() -> None:
    topo = Topology.synthetic(sockets=2, cores_per_node=4)
    free = topo.online - CPUSet.of(0, 8)  # reserved core 0
    assert allocate_cpus(topo, free, 8) == topo.cpus_of_socket(1)
    assert allocate_cpus(topo, free, 6) == topo.cpus_of_socket(0) - CPUSet.of(0, 8)


# ----- properties -----------------------------------------------------------------------------


def _check_allocation(topo: Topology, free: CPUSet, n: int, got: CPUSet) -> None:
    assert len(got) == n
    assert got <= free
    # whole cores whenever the free whole cores allow it; otherwise split no more than needed
    assert split_cpus(topo, got) <= n - idle_core_capacity(topo, free, n)
    idle_nodes = [
        node
        for node in topo.cpu_nodes()
        if topo.cpus_of_node(node) <= free and len(topo.cpus_of_node(node)) >= n
    ]
    if idle_nodes:
        assert len(topo.nodes_of_cpus(got)) == 1, f"{n} CPUs spread over nodes: {got}"


def _run_sequence(topo: Topology, data: st.DataObject, steps: int) -> None:
    held: list[CPUSet] = []
    free = topo.online
    for _ in range(steps):
        op = data.draw(st.sampled_from(["alloc", "alloc", "alloc", "free", "shrink"]))
        if op == "alloc" or not held:
            n = data.draw(
                st.integers(min_value=1, max_value=max(1, min(len(topo.online) // 2, 40)))
            )
            if n > len(free):
                with pytest.raises(NotEnoughCPUs):
                    allocate_cpus(topo, free, n)
                continue
            got = allocate_cpus(topo, free, n)
            _check_allocation(topo, free, n, got)
            held.append(got)
            free -= got
        else:
            i = data.draw(st.integers(min_value=0, max_value=len(held) - 1))
            if op == "free":
                free |= held.pop(i)
            else:
                count = data.draw(st.integers(min_value=0, max_value=len(held[i])))
                back = release_cpus(topo, held[i], count)
                assert back <= held[i] and len(back) == count
                held[i] -= back
                free |= back
        assert free | CPUSet().union(*held) == topo.online
        assert len(free) + sum(map(len, held)) == len(topo.online)


@pytest.mark.parametrize("name", SNAPSHOTS)
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_random_allocate_release_sequences(
    topologies: dict[str, Topology], name: str, data: st.DataObject
) -> None:
    _run_sequence(topologies[name], data, steps=12)


@settings(max_examples=40, deadline=None)
@given(
    data=st.data(),
    shape=st.fixed_dictionaries(
        {
            "sockets": st.integers(1, 3),
            "dies_per_socket": st.integers(1, 2),
            "nodes_per_die": st.integers(1, 2),
            "cores_per_node": st.integers(1, 6),
            "threads_per_core": st.sampled_from([1, 2, 2, 4]),
            "l3": st.sampled_from(["socket", "die", "node", "none"]),
        }
    ),
)
def test_random_sequences_on_synthetic_shapes(data: st.DataObject, shape: dict) -> None:
    _run_sequence(Topology.synthetic(**shape), data, steps=10)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_fits_in_a_node_with_free_cores_lands_in_one_node(
    topologies: dict[str, Topology], data: st.DataObject
) -> None:
    # Beyond idle nodes: any node that has enough free whole cores for an even request.
    topo = topologies[data.draw(st.sampled_from(["server", "2-socket-4-node-40-core", "sample2"]))]
    busy = data.draw(st.sets(st.sampled_from(sorted(topo.online)), max_size=60))
    free = topo.online - CPUSet(busy)
    n = 2 * data.draw(st.integers(1, 10))
    fits = [
        node
        for node in topo.cpu_nodes()
        if sum(len(c) for c in topo.cores() if c <= free & topo.cpus_of_node(node)) >= n
    ]
    if n > len(free):
        return
    got = allocate_cpus(topo, free, n)
    _check_allocation(topo, free, n, got)
    if fits:
        assert len(topo.nodes_of_cpus(got)) == 1
        assert whole_cores(topo, got)
