"""Random churn on the balloons policy, on a synthetic machine and the real snapshots: no CPU is
ever in two balloons, no balloon breaks its type's bounds, no type its balloon counts, and a
refusal changes nothing."""

from __future__ import annotations

import pytest
from bsupport import MACHINE, balloons, by_name, check_invariants, req
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from enforcer.policy import PlacementError
from enforcer.sysfs import read_topology
from enforcer.topology import Topology
from tests.support.snapshots import extract_snapshots

TYPES = [
    {"name": "small", "namespaces": ["s"], "minCPUs": 1, "maxCPUs": 3, "maxBalloons": 3},
    {
        "name": "wide",
        "namespaces": ["w"],
        "minCPUs": 2,
        "minBalloons": 1,
        "shareIdleCPUsInSame": "numa",
    },
    {"name": "spread", "namespaces": ["p"], "preferSpreadingPods": True, "maxCPUs": 4},
    {"name": "fresh", "namespaces": ["f"], "preferNewBalloons": True, "maxBalloons": 2},
    {"name": "perns", "namespaces": ["n*"], "preferPerNamespaceBalloon": True},
]
NAMESPACES = ["s", "w", "p", "f", "n1", "n2", "web", "kube-system"]

op = st.tuples(
    st.sampled_from(["admit", "admit", "admit", "release"]),
    st.integers(0, 11),  # container
    st.integers(0, 3),  # pod
    st.sampled_from(NAMESPACES),
    st.sampled_from([0, 100, 500, 1000, 1500, 2000, 3500]),
)


def churn(p, ops) -> None:  # type: ignore[no-untyped-def]
    live: dict[str, str] = {}
    for action, c, pod, ns, milli in ops:
        name = f"c{c}"
        if action == "release":
            if name in live:
                p.release(live.pop(name))
        else:
            request = req(name, milli, pod=f"p{pod}", namespace=ns)
            if name in live and live[name] != request.key:
                p.release(live.pop(name))
            before = (by_name(p), dict(p.admitted))
            try:
                p.admit(request)  # a new container, or a resize of a live one
                live[name] = request.key
            except PlacementError:
                assert (by_name(p), dict(p.admitted)) == before  # nothing changed
        check_invariants(p)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op, max_size=40))
def test_no_cpu_in_two_balloons_and_bounds_hold_over_random_churn(ops: list) -> None:
    churn(balloons(TYPES, MACHINE), ops)


@pytest.fixture(scope="module")
def snapshot_topologies(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Topology]:
    roots = extract_snapshots(
        tmp_path_factory.mktemp("sysfs"), ["server", "2-socket-4-node-40-core"]
    )
    return {name: read_topology(str(path)) for name, path in roots.items()}


@pytest.mark.parametrize("snapshot", ["server", "2-socket-4-node-40-core"])
def test_invariants_over_churn_on_recorded_servers(
    snapshot_topologies: dict[str, Topology], snapshot: str
) -> None:
    topology = snapshot_topologies[snapshot]
    types = [dict(t) for t in TYPES]
    types[1]["minBalloons"] = 2
    p = balloons(types, topology, reserved=2)

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(op, max_size=40))
    def run(ops: list) -> None:
        churn(balloons(types, topology, reserved=2), ops)

    run()
    # On a real server a new balloon of 4 CPUs is two whole cores of one NUMA node.
    placed = p.admit(req("four", 4000, namespace="p", pod="q")).cpus
    assert len(placed) == 4 and len(topology.nodes_of_cpus(placed)) == 1
    assert all(core <= placed or not core & placed for core in topology.cores())
