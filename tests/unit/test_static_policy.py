"""The static policy: kubelet's CPU manager semantics, on synthetic machines."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from enforcer.decode import ContainerRequest, Preferences
from enforcer.policy import PlacementError, StaticPolicy, make_policy
from enforcer.refusal import Reason
from enforcer.topology import CPUSet, Topology
from resource_contract.config import ConfigError
from resource_contract.policy_config import PolicyConfig

MACHINE = Topology.synthetic(sockets=2, cores_per_node=4, threads_per_core=2)  # 16 CPUs


def req(name: str, milli: int = 0, qos: str = "Guaranteed", **prefs: bool) -> ContainerRequest:
    return ContainerRequest(
        pod_uid=f"uid-{name}",
        pod_name=name,
        namespace="ns",
        container="c",
        qos=qos,  # type: ignore[arg-type]
        cpu_request_milli=milli,
        cpu_limit_milli=milli,
        preferences=Preferences(**prefs),
    )


def static(**config: object) -> StaticPolicy:
    policy = make_policy(MACHINE, PolicyConfig(name="static", **config))
    assert isinstance(policy, StaticPolicy)
    return policy


def test_reserved_as_quantity_takes_cpus_along_the_topology() -> None:
    policy = static(reservedCPUs=2)
    assert len(policy.reserved) == 2
    assert len(MACHINE.nodes_of_cpus(policy.reserved)) == 1
    # Two CPUs of one core: a whole core, not two halves.
    assert policy.reserved in [c for c in MACHINE.cores()]


def test_reserved_fraction_rounds_up_and_cpuset_is_taken_as_is() -> None:
    assert len(static(reservedCPUs="1500m").reserved) == 2
    assert static(reservedCPUs="3,5").reserved == CPUSet.of(3, 5)


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"reservedCPUs": "0-99"}, "policy.reservedCPUs"),
        ({"reservedCPUs": 17}, "policy.reservedCPUs"),
        ({"availableCPUs": "0-31"}, "policy.availableCPUs"),
        ({"availableCPUs": "0-3", "reservedCPUs": "4"}, "policy.reservedCPUs"),
    ],
)
def test_impossible_cpu_sets_are_refused_naming_the_key(config: dict, key: str) -> None:
    with pytest.raises(ConfigError) as err:
        static(**config)
    assert err.value.problems[0].startswith(key + ":")


def test_guaranteed_integer_gets_exclusive_cpus_and_leaves_the_shared_pool() -> None:
    policy = static(reservedCPUs="0")
    g = policy.admit(req("g", 2000))
    assert g.kind == "exclusive" and len(g.exclusive) == 2 and g.cpus == g.exclusive
    assert 0 not in g.exclusive  # reserved CPUs are never handed out
    b = policy.admit(req("b", qos="BestEffort"))
    assert b.kind == "shared" and b.cpus == MACHINE.online - g.exclusive
    assert 0 in b.cpus  # the shared pool includes the reserved CPUs


@pytest.mark.parametrize(
    ("milli", "qos"), [(1500, "Guaranteed"), (500, "Guaranteed"), (2000, "Burstable")]
)
def test_only_guaranteed_whole_cpus_are_exclusive(milli: int, qos: str) -> None:
    assert static(reservedCPUs=1).admit(req("x", milli, qos)).kind == "shared"


def test_shared_containers_follow_the_pool_as_it_changes() -> None:
    policy = static(reservedCPUs=1)
    shared = req("b", qos="BestEffort")
    policy.admit(shared)
    before = policy.placement(shared.key).cpus
    g = policy.admit(req("g", 4000))
    assert policy.placement(shared.key).cpus == before - g.exclusive
    policy.release(req("g").key)
    assert policy.placement(shared.key).cpus == before


def test_not_enough_cpus_says_what_was_asked_and_what_is_free() -> None:
    policy = static(reservedCPUs=2)
    policy.admit(req("a", 12000))
    with pytest.raises(PlacementError) as err:
        policy.admit(req("b", 4000))
    assert err.value.reason == Reason.NO_ROOM
    assert "asked for 4 exclusive CPUs, 2 free" in str(err.value)
    # The refusal changed nothing.
    assert len(policy.taken) == 12 and req("b").key not in policy.admitted


def test_without_reserved_cpus_one_cpu_stays_shared() -> None:
    policy = static()
    policy.admit(req("a", 15000))
    with pytest.raises(PlacementError):
        policy.admit(req("b", 1000))
    assert len(policy.shared_pool) == 1


def test_preserve_keeps_kubelets_cpus_cut_to_the_shared_pool() -> None:
    policy = static(reservedCPUs=1)
    placement = policy.admit(req("p", 2000, preserve=True))
    # kubelet asked for no cpuset (every CPU): all of the shared pool, reserved CPUs included.
    assert placement.kind == "preserved" and not placement.exclusive
    assert placement.cpus == policy.shared_pool == MACHINE.online and placement.mems is None


def test_kubelets_checked_cpusets_survive_the_saved_state() -> None:
    policy = static(reservedCPUs=1)
    kept = replace(
        req("p", 2000, preserve=True), kubelet_cpus=CPUSet.of(3, 4), kubelet_mems=CPUSet.of(1)
    )
    policy.admit(kept)
    saved = json.loads(json.dumps(policy.to_state()))
    assert saved["admitted"][0]["request"]["kubelet_cpus"] == "3-4"
    restored = static(reservedCPUs=1)
    assert restored.restore(saved) == []
    assert restored.admitted[kept.key].request == kept
    # A state written before they were checked held kubelet's strings as they came.
    saved["admitted"][0]["request"].update(kubelet_cpus=" 4,3\n", kubelet_mems="")
    restored = static(reservedCPUs=1)
    assert restored.restore(saved) == []
    assert restored.admitted[kept.key].request.kubelet_cpus == CPUSet.of(3, 4)


def test_readmitting_a_key_keeps_its_cpus() -> None:
    policy = static(reservedCPUs=1)
    first = policy.admit(req("g", 2000))
    policy.admit(req("other", 2000))
    assert policy.admit(req("g", 2000)).exclusive == first.exclusive


def test_keep_is_honoured_when_free_and_ignored_when_not() -> None:
    policy = static(reservedCPUs="0")
    assert policy.admit(req("a", 2000), keep=CPUSet.of(6, 14)).exclusive == CPUSet.of(6, 14)
    assert policy.admit(req("b", 2000), keep=CPUSet.of(6, 14)).exclusive != CPUSet.of(6, 14)


def test_state_round_trip_gives_the_same_decisions() -> None:
    policy = static(reservedCPUs=2)
    for i, milli in enumerate([1000, 2000, 500, 4000, 0]):
        policy.admit(req(f"p{i}", milli, "Guaranteed" if milli else "BestEffort"))
    restored = static(reservedCPUs=2)
    assert restored.restore(policy.to_state()) == []
    assert restored.placements() == policy.placements()


def test_restore_reports_what_no_longer_fits() -> None:
    policy = static(reservedCPUs=1)
    policy.admit(req("big", 12000))
    smaller = static(reservedCPUs=8)
    problems = smaller.restore(policy.to_state())
    assert len(problems) == 1 and "ns/big/c" in problems[0]
