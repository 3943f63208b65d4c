"""The allocator under kubelet's CPU manager options, over random busy CPUs on the recorded
servers: every answer is what was asked, out of the free CPUs, and keeps each option's
guarantee (tests/policy/test_kubelet_options.py checks them through the policies)."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from enforcer.cpuallocator import (
    CPUOptions,
    NotEnoughCPUs,
    SMTAlignmentError,
    cpus_per_core,
    take_cpus,
    whole_cores,
)
from enforcer.topology import CPUSet, Topology
from enforcer.topology.model import Level

# Every combination kubelet accepts (it refuses the pairs with distribute-across-cores, and
# uncore-cache alignment with distribute-across-numa).
OPTIONS = [
    CPUOptions(full_pcpus_only=f, distribute_across_numa=n, align_by_socket=a)
    for f in (False, True)
    for n in (False, True)
    for a in (False, True)
] + [
    CPUOptions(distribute_across_cores=True),
    CPUOptions(distribute_across_cores=True, align_by_socket=True),
    CPUOptions(prefer_uncore_cache=True),
    CPUOptions(prefer_uncore_cache=True, full_pcpus_only=True, align_by_socket=True),
]


def units_holding(topology: Topology, level: Level, free: CPUSet, n: int) -> bool:
    return any(len(cpus & free) >= n for cpus in topology.units(level).values())


@pytest.mark.parametrize("snapshot", ["server", "2-socket-4-node-40-core", "sample1"])
def test_every_option_keeps_its_guarantee(topologies: dict[str, Topology], snapshot: str) -> None:
    topology = topologies[snapshot]
    online = sorted(topology.online)

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(
        busy=st.sets(st.sampled_from(online), max_size=len(online) // 2),
        n=st.integers(1, len(online)),
        options=st.sampled_from(OPTIONS),
    )
    def check(busy: set[int], n: int, options: CPUOptions) -> None:
        free = topology.online - CPUSet(busy)
        group = cpus_per_core(topology)
        usable = whole_cores(topology, free) if options.full_pcpus_only else free
        try:
            got = take_cpus(topology, free, n, options)
        except SMTAlignmentError as exc:
            assert options.full_pcpus_only
            assert n % group or n > len(usable), exc
            return
        except NotEnoughCPUs:
            assert n > len(usable)
            return
        assert len(got) == n and got <= usable
        if options.full_pcpus_only:
            assert whole_cores(topology, got) == got
        if options.align_by_socket and units_holding(topology, "socket", usable, n):
            assert len(topology.sockets_of_cpus(got)) == 1
        if options.distribute_across_numa:
            nodes = topology.nodes_of_cpus(got)
            if units_holding(topology, "node", usable, n):
                assert len(nodes) == 1
        if options.distribute_across_cores:
            cores = [c for c in topology.cores() if c & usable]
            if len(cores) >= n and not options.align_by_socket:
                assert len([c for c in topology.cores() if c & got]) == n
        if options.prefer_uncore_cache and units_holding(topology, "l3", usable, n):
            assert len({topology.cpus[c].l3 for c in got}) == 1

    check()


def test_distribute_across_numa_is_even_on_an_idle_machine(
    topologies: dict[str, Topology],
) -> None:
    topology = topologies["4-socket-server-nosnc"]  # 4 nodes of 36 CPUs
    for n in (37, 50, 73, 100, 144):
        got = take_cpus(topology, topology.online, n, CPUOptions(distribute_across_numa=True))
        counts = [len(got & topology.cpus_of_node(node)) for node in topology.cpu_nodes()]
        used = [c for c in counts if c]
        assert len(used) == math.ceil(n / 36), (n, counts)
        assert max(used) - min(used) <= 1, (n, counts)


@pytest.mark.parametrize(
    ("snapshot", "busy", "n"),
    [("2-socket-4-node-40-core", {0, 1, 2, 3}, 20), ("server", {0, 1, 2}, 28)],
)
def test_socket_alignment_does_not_split_a_request_one_node_holds(
    topologies: dict[str, Topology], snapshot: str, busy: set[int], n: int
) -> None:
    """Found by the property test above: align-by-socket chose the fullest socket first, whose
    nodes held the request only together, while a node of the other socket held it whole."""
    topology = topologies[snapshot]
    free = topology.online - CPUSet(busy)
    options = CPUOptions(distribute_across_numa=True, align_by_socket=True)
    got = take_cpus(topology, free, n, options)
    assert len(got) == n and got <= free
    assert len(topology.nodes_of_cpus(got)) == 1
    assert len(topology.sockets_of_cpus(got)) == 1
