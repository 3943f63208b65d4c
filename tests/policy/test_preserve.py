"""`cpu.preserve` under the static and topology-aware policies (and balloons where named):
kubelet's CPUs cut to the CPUs the container may share, never CPUs exclusive to another
container or reserved ones it is not entitled to; refused when nothing remains; the cut
follows later exclusive allocations."""

from __future__ import annotations

import pytest

from enforcer.decode import ContainerRequest, Preferences
from enforcer.policy import PlacementError, Policy, make_policy
from enforcer.refusal import Reason
from enforcer.topology import CPUSet, Topology
from resource_contract.policy_config import PolicyConfig

MACHINE = Topology.synthetic(sockets=1, cores_per_node=4, threads_per_core=1)  # CPUs 0-3
ALL = MACHINE.online
RESERVED = CPUSet.of(0)
POLICIES = ["static", "topology-aware"]


def req(
    name: str,
    milli: int = 0,
    *,
    namespace: str = "tenant",
    kubelet_cpus: str = "",
    **prefs: bool,
) -> ContainerRequest:
    return ContainerRequest(
        pod_uid=f"uid-{name}",
        pod_name=name,
        namespace=namespace,
        container="c",
        qos="Guaranteed" if milli else "BestEffort",
        cpu_request_milli=milli,
        cpu_limit_milli=milli,
        preferences=Preferences(**prefs),
        kubelet_cpus=CPUSet.parse(kubelet_cpus),
    )


def make(name: str, topology: Topology = MACHINE, **config: object) -> Policy:
    return make_policy(topology, PolicyConfig(name=name, reservedCPUs=str(RESERVED), **config))


def shared_of(name: str) -> CPUSet:
    """Where shared containers run with nothing held: static shares the reserved CPUs too."""
    return ALL if name == "static" else ALL - RESERVED


@pytest.mark.parametrize("name", POLICIES)
def test_preserved_container_moves_off_cpus_another_container_takes(name: str) -> None:
    policy = make(name)
    assert policy.admit(req("keep", preserve=True)).cpus == shared_of(name)
    exclusive = policy.admit(req("g", 1000)).exclusive
    assert len(exclusive) == 1
    # Taken later: the preserved container's cpuset shrinks (the engine re-pins to this).
    now = policy.placement("uid-keep/c")
    assert now.cpus == shared_of(name) - exclusive and now.kind == "preserved"
    assert not now.exclusive and now.mems is None
    policy.release("uid-g/c")
    assert policy.placement("uid-keep/c").cpus == shared_of(name)


@pytest.mark.parametrize("name", POLICIES)
def test_preserved_container_admitted_after_an_exclusive_one_avoids_its_cpus(name: str) -> None:
    policy = make(name)
    exclusive = policy.admit(req("g", 1000)).exclusive
    assert policy.admit(req("keep", preserve=True)).cpus == shared_of(name) - exclusive


@pytest.mark.parametrize("name", POLICIES)
def test_kubelets_own_cpuset_is_cut_never_widened(name: str) -> None:
    policy = make(name)
    assert policy.admit(req("keep", kubelet_cpus="2-3", preserve=True)).cpus == CPUSet.of(2, 3)
    policy.admit(req("g3", 1000), keep=CPUSet.of(3))
    assert policy.placement("uid-keep/c").cpus == CPUSet.of(2)
    # Every CPU kubelet asked for is taken now: the preserved container runs on the whole
    # shared pool rather than on another container's CPUs.
    policy.admit(req("g2", 1000), keep=CPUSet.of(2))
    assert policy.placement("uid-keep/c").cpus == shared_of(name) - CPUSet.of(2, 3)


@pytest.mark.parametrize("name", POLICIES)
def test_refused_when_nothing_of_kubelets_cpuset_remains(name: str) -> None:
    policy = make(name)
    policy.admit(req("keep", kubelet_cpus="2-3", preserve=True))
    policy.admit(req("g", 1000), keep=CPUSet.of(3))
    before = policy.placements()
    with pytest.raises(PlacementError) as err:
        policy.admit(req("late", kubelet_cpus="3", preserve=True))
    assert err.value.reason == Reason.NO_ROOM
    message = str(err.value)
    assert "tenant/late" in message and "cpu.preserve" in message and "CPUs 3" in message
    # A refused re-admission of a known key changes nothing either.
    with pytest.raises(PlacementError):
        policy.admit(req("keep", kubelet_cpus="3", preserve=True))
    assert policy.placements() == before


@pytest.mark.parametrize("name", [*POLICIES, "balloons"])
def test_preserved_container_never_runs_on_cpus_others_took_all_of(name: str) -> None:
    """The property test's failing churn, reduced: with reserved CPUs the root (topology-aware)
    may give away its last shared CPU; a preserved container then runs on the reserved CPUs,
    as BestEffort containers do, and never on the CPUs another container holds."""
    policy = make(name)
    policy.admit(req("keep", preserve=True))  # kubelet asked for every CPU
    policy.admit(req("narrow", kubelet_cpus="2-3", preserve=True))
    taker = policy.admit(req("g", 3000))
    assert taker.cpus == ALL - RESERVED  # every CPU but the reserved one
    for key in ("uid-keep/c", "uid-narrow/c"):
        now = policy.placement(key)
        assert now.cpus == RESERVED and not now.cpus & taker.cpus, key
    if name != "balloons":  # there it joins the default balloon
        assert policy.admit(req("be")).cpus == RESERVED  # where a BestEffort one runs too
    # The state restores to the same pinning; freed, kubelet's CPUs come back.
    restored = make(name)
    assert restored.restore(policy.to_state()) == []
    assert restored.placements() == policy.placements()
    policy.release("uid-g/c")
    assert policy.placement("uid-narrow/c").cpus == CPUSet.of(2, 3)


def test_topology_aware_strict_reservation_keeps_a_shared_cpu_for_preserved_containers() -> None:
    """Under strictCPUReservation a tenant's preserved container may never run on the reserved
    CPUs: the root keeps a shared CPU, and taking it is refused."""
    policy = make("topology-aware", strictCPUReservation=True)
    policy.admit(req("keep", preserve=True))
    with pytest.raises(PlacementError):
        policy.admit(req("g", 3000))
    assert len(policy.admit(req("g", 2000)).exclusive) == 2
    now = policy.placement("uid-keep/c")
    assert now.cpus and not now.cpus & (RESERVED | policy.taken)


# A kubelet cpuset that is not a CPU list is refused when decoded (tests/unit/test_decode.py).


def test_static_reserved_cpus_are_part_of_the_shared_pool() -> None:
    policy = make("static")
    assert policy.admit(req("keep", kubelet_cpus="0", preserve=True)).cpus == RESERVED


def test_topology_aware_reserved_cpus_only_for_containers_entitled_to_them() -> None:
    policy = make("topology-aware", reservedNamespaces=["kube-system"])
    with pytest.raises(PlacementError):
        policy.admit(req("tenant", kubelet_cpus="0", preserve=True))
    system = req("system", namespace="kube-system", kubelet_cpus="0", preserve=True)
    assert policy.admit(system).cpus == RESERVED
    agent = req("agent", preserve=True, reserved=True)
    assert policy.admit(agent).cpus == ALL
    assert policy.admit(req("plain", preserve=True)).cpus == ALL - RESERVED


def test_topology_aware_isolated_cpus_are_cut_away() -> None:
    machine = Topology.synthetic(sockets=1, cores_per_node=4, threads_per_core=1, isolated="3")
    policy = make("topology-aware", machine)
    assert policy.admit(req("keep", preserve=True)).cpus == CPUSet.of(1, 2)


@pytest.mark.parametrize("name", POLICIES)
def test_restore_keeps_the_cut(name: str) -> None:
    policy = make(name)
    policy.admit(req("keep", kubelet_cpus="1-3", preserve=True))
    policy.admit(req("g", 1000), keep=CPUSet.of(3))
    restored = make(name)
    assert restored.restore(policy.to_state()) == []
    assert restored.placements() == policy.placements()


def test_restore_reports_a_preserved_container_with_nothing_left() -> None:
    policy = make("topology-aware")
    policy.admit(req("keep", kubelet_cpus="3", preserve=True))
    # CPU 3 becomes reserved: a tenant's preserved container may not run there any more.
    moved = make_policy(MACHINE, PolicyConfig(name="topology-aware", reservedCPUs="3"))
    problems = moved.restore(policy.to_state())
    assert len(problems) == 1 and "tenant/keep/c" in problems[0] and "cpu.preserve" in problems[0]
