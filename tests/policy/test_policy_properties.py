"""Properties of the static and topology-aware policies under random pod churn on the real
snapshots: random sequences of pod creations and removals, every invariant checked after every
step, and the saved state restored at the end must decide the same."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from enforcer.decode import ContainerRequest, Preferences
from enforcer.policy import PlacementError, Policy, TopologyAwarePolicy, make_policy
from enforcer.topology import CPUSet, Topology
from resource_contract.policy_config import PolicyConfig

GiB = 1 << 30
SNAPSHOTS = [
    "4-socket-server-nosnc",
    "server",
    "desktop",
    "2-socket-4-node-40-core",
    "sample1",
    "sample2",
]


@dataclass(frozen=True)
class PodSpec:
    qos: str
    milli: int
    memory: int
    containers: int
    namespace: str
    isolated: bool | None
    shared: bool | None
    preserve: bool | None = None  # kubelet asked for no cpuset: every CPU


guaranteed = st.builds(
    PodSpec,
    qos=st.just("Guaranteed"),
    milli=st.sampled_from([200, 1000, 1000, 1000, 2000, 2000, 2500, 3000, 4000, 6000, 16000]),
    memory=st.sampled_from([GiB, 4 * GiB, 16 * GiB]),
    containers=st.integers(1, 3),
    namespace=st.sampled_from(["default"] * 9 + ["kube-system"]),
    isolated=st.sampled_from([None, True, False, False]),
    shared=st.sampled_from([None, None, None, True]),
    preserve=st.sampled_from([None] * 9 + [True]),
)
others = st.builds(
    PodSpec,
    qos=st.sampled_from(["Burstable", "BestEffort"]),
    milli=st.sampled_from([0, 100, 500, 1500, 3000]),
    memory=st.sampled_from([0, 512 << 20, 8 * GiB, 64 * GiB]),
    containers=st.integers(1, 2),
    namespace=st.sampled_from(["default"] * 9 + ["kube-system"]),
    isolated=st.none(),
    shared=st.none(),
    preserve=st.sampled_from([None] * 9 + [True]),
)
# ("add", spec) or ("remove", which of the live pods, as a fraction of their count)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.one_of(guaranteed, guaranteed, others)),
        st.tuples(st.just("remove"), st.floats(0, 1, exclude_max=True)),
    ),
    min_size=10,
    max_size=50,
)


def requests_of(index: int, spec: PodSpec) -> list[ContainerRequest]:
    best_effort = spec.qos == "BestEffort"
    return [
        ContainerRequest(
            pod_uid=f"uid-{index}",
            pod_name=f"pod{index}",
            namespace=spec.namespace,
            container=f"c{c}",
            qos=spec.qos,  # type: ignore[arg-type]
            cpu_request_milli=0 if best_effort else spec.milli,
            cpu_limit_milli=spec.milli if spec.qos == "Guaranteed" else 0,
            memory_request=0 if best_effort else spec.memory,
            memory_limit=spec.memory if spec.qos == "Guaranteed" else 0,
            preferences=Preferences(
                isolated=spec.isolated, shared=spec.shared, preserve=spec.preserve
            ),
        )
        for c in range(spec.containers)
    ]


# ----- what each policy may hand out exclusively ---------------------------------------------


def exclusive_free(policy: Policy) -> CPUSet:
    free = policy.available - policy.reserved - policy.taken
    if isinstance(policy, TopologyAwarePolicy):
        free -= policy.topology.isolated
    return free


def margin(policy: Policy, request: ContainerRequest) -> int:
    """Cores that CPUs kept back for shared work may break: an upper bound."""
    if not isinstance(policy, TopologyAwarePolicy):
        return 1  # the static policy may keep one CPU for its shared pool
    sharing = [a.shared_milli for a in policy.admitted.values() if a.kind in ("shared", "mixed")]
    need = policy.need(request)
    if need.shares:
        sharing.append(need.milli)
    return 1 + sum(math.ceil(m / 1000) + 1 for m in sharing)


def idle_cores(topology: Topology, free: CPUSet) -> int:
    return sum(1 for core in topology.cores() if len(core) == 2 and core <= free)


def node_memory_free(policy: Policy, node: int) -> int | None:
    """Free memory of the pool that is exactly this NUMA node (None: no limit applies)."""
    if not isinstance(policy, TopologyAwarePolicy):
        return None
    node_cpus = policy.topology.cpus_of_node(node) & policy.available
    for view in policy.pools():
        if view.cpus == node_cpus:
            if view.depth == 0 or not view.memory_capacity:
                return None  # the root never refuses memory
            return view.memory_capacity - view.memory_used
    return 0  # no pool is this node alone


def exclusive_count(policy: Policy, request: ContainerRequest) -> int:
    if isinstance(policy, TopologyAwarePolicy):
        need = policy.need(request)
        return 0 if need.isolated else need.exclusive
    if request.preferences.preserve or request.preferences.shared:
        return 0
    return request.exclusive_cpus


# ----- invariants ----------------------------------------------------------------------------


def check_invariants(policy: Policy) -> None:
    topo = policy.topology
    placements = policy.placements()
    held: dict[int, str] = {}
    for key, p in placements.items():
        for cpu in p.exclusive:
            assert cpu not in held, f"CPU {cpu} held by {held[cpu]} and {key}"
            held[cpu] = key
        assert p.exclusive <= policy.available - policy.reserved
    exclusive = CPUSet(held)
    assert exclusive == policy.taken
    for key, p in placements.items():
        if p.cpus is None:
            continue
        assert p.cpus, f"{key} has no CPUs"
        shared_part = p.cpus - p.exclusive
        # Shared containers never run on CPUs someone holds exclusively.
        assert not shared_part & exclusive, key
        if not isinstance(policy, TopologyAwarePolicy):
            continue
        admitted = policy.admitted[key]
        if p.kind == "preserved":
            # kubelet's CPUs cut to the root's shared CPUs (and reserved ones only for those
            # entitled to them); memory nodes left to kubelet.
            assert p.mems is None and not p.cpus & (topo.isolated - policy.reserved), key
            root_shared = policy.pools()[0].shared
            assert p.cpus <= root_shared | policy.reserved, key
            entitled = admitted.request.namespace == "kube-system"
            if p.cpus & policy.reserved and not entitled:
                # Only the root's fallback, as for its BestEffort containers: no shared CPU
                # left at the root.
                assert not root_shared and p.cpus == policy.reserved, key
            continue
        assert p.mems == topo.memory_nodes_of_cpus(p.cpus), key  # pinMemory is on
        if p.kind in ("shared", "mixed"):
            if shared_part & policy.reserved:
                # Only the root's fallback: nothing granted, and no shared CPU left anywhere.
                root = policy.pools()[0]
                assert admitted.pool == root.name and not admitted.shared_milli, key
                assert not root.shared and p.cpus == policy.reserved, key
            assert not shared_part & topo.isolated, key
            assert len(shared_part) * 1000 >= admitted.shared_milli, key
        if p.kind == "exclusive" and len(p.exclusive) > 1:
            assert not p.exclusive & topo.isolated, key
    if isinstance(policy, TopologyAwarePolicy):
        for view in policy.pools():
            # Exclusive CPUs never shrink a pool below what its shared containers were granted.
            assert len(view.shared) * 1000 >= view.shared_milli, view.name
            assert view.free >= 0


def check_admission(policy: Policy, request: ContainerRequest) -> None:
    """Admits `request` and checks the allocation properties that depend on the state before."""
    topo = policy.topology
    before = policy.placements()
    count = exclusive_count(policy, request)
    free = exclusive_free(policy)
    slack = margin(policy, request)
    try:
        placed = policy.admit(request)
    except PlacementError:
        assert policy.placements() == before, "a refusal must change nothing"
        assert request.key not in policy.admitted
        return
    if not count or len(placed.exclusive) != count or count % 2:
        return
    # Whole cores whenever enough whole idle cores were free.
    if idle_cores(topo, free) >= count // 2 + slack:
        assert all(topo.siblings(c) <= placed.exclusive for c in placed.exclusive), (
            f"{request.key}: {placed.exclusive} splits cores"
        )
    # One NUMA node whenever one node could hold it with whole cores (and its memory).
    memory = request.memory_limit or request.memory_request
    for node in topo.cpu_nodes():
        if idle_cores(topo, free & topo.cpus_of_node(node)) < count // 2 + slack:
            continue
        room = node_memory_free(policy, node)
        if room is None or memory <= room:
            assert len(topo.nodes_of_cpus(placed.exclusive)) == 1, (
                f"{request.key}: {placed.exclusive} fits node {node} but spans nodes"
            )
            break


def make(topology: Topology, name: str) -> Policy:
    return make_policy(
        topology,
        PolicyConfig(name=name, reservedCPUs=2, pinMemory=True, reservedNamespaces=["kube-system"]),
    )


@pytest.mark.parametrize("policy_name", ["static", "topology-aware"])
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(snapshot=st.sampled_from(SNAPSHOTS), ops=operations)
def test_random_churn_keeps_every_invariant(
    topologies: dict[str, Topology], policy_name: str, snapshot: str, ops: list
) -> None:
    topology = topologies[snapshot]
    policy = make(topology, policy_name)
    live: list[list[ContainerRequest]] = []
    for index, (op, arg) in enumerate(ops):
        if op == "add":
            pod = requests_of(index, arg)
            for request in pod:
                check_admission(policy, request)
            live.append(pod)
        elif live:
            pod = live.pop(int(arg * len(live)))
            for request in pod:
                policy.release(request.key)
        check_invariants(policy)

    # The saved state, through JSON, restores to the same decisions ...
    restored = make(topology, policy_name)
    assert restored.restore(json.loads(json.dumps(policy.to_state()))) == []
    assert restored.placements() == policy.placements()
    assert restored.pools() == policy.pools()
    # ... and the next decisions are the same too.
    extra = PodSpec("Guaranteed", 2000, GiB, 2, "default", None, None)
    for request in requests_of(len(ops), extra) + requests_of(len(ops) + 1, ops_spec(ops)):
        outcomes = []
        for p in (policy, restored):
            try:
                outcomes.append(p.admit(request))
            except PlacementError as exc:
                outcomes.append(str(exc))
        assert outcomes[0] == outcomes[1]
    assert restored.placements() == policy.placements()


def ops_spec(ops: list) -> PodSpec:
    """The last pod spec of the sequence (or a Burstable one): one more admission to compare."""
    specs = [arg for op, arg in ops if op == "add"]
    return specs[-1] if specs else PodSpec("Burstable", 500, GiB, 1, "default", None, None)
