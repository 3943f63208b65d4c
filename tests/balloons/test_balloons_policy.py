"""The balloons policy on a synthetic machine: one test per behaviour of the NRI balloons
policy's documentation that we carry over, in our words (see docs/policies.md#balloons).

MACHINE (tests/balloons/bsupport.py): 2 sockets x 2 NUMA nodes x 2 cores x 2 threads;
node0 = cores {0,8} {1,9}, node1 = {2,10} {3,11}, node2 = {4,12} {5,13}, node3 = {6,14} {7,15}.
Reserved: core {0,8} unless a test says otherwise.
"""

from __future__ import annotations

import pytest
from bsupport import MACHINE, balloons, by_name, check_invariants, key, req

from enforcer.policy import PlacementError
from enforcer.refusal import Reason
from enforcer.topology import CPUSet, Topology
from resource_contract.config import ConfigError


def cpus(text: str) -> CPUSet:
    return CPUSet.parse(text)


def test_a_container_runs_on_its_balloons_cpus_and_no_others() -> None:
    p = balloons([{"name": "quad", "namespaces": ["*"], "maxCPUs": 4}])
    placement = p.admit(req("a", 2000))
    assert placement.kind == "balloon" and placement.pool == "quad[0]"
    assert placement.cpus == by_name(p)["quad[0]"] and len(placement.cpus) == 2
    # Nothing outside the balloon, not even idle CPUs (no shareIdleCPUsInSame).
    assert not placement.cpus & (p.available - by_name(p)["quad[0]"])
    check_invariants(p)


def test_balloons_are_disjoint() -> None:
    p = balloons([{"name": "pair", "namespaces": ["*"], "minCPUs": 2, "maxCPUs": 2}])
    for i in range(6):
        p.admit(req(f"c{i}", 1500))
    views = [v for v in p.balloon_views() if v.type == "pair"]
    assert len(views) == 6
    check_invariants(p)


def test_a_balloon_inflates_with_its_containers_requests_rounded_up() -> None:
    p = balloons([{"name": "grow", "namespaces": ["*"], "maxBalloons": 1}])
    first = p.admit(req("a", 1200))
    assert len(first.cpus) == 2  # 1200m rounds up to 2 CPUs
    second = p.admit(req("b", 900))
    assert len(second.cpus) == 3  # 2100m: 3 CPUs, for both containers
    assert p.placement(key("a")).cpus == second.cpus
    assert first.cpus < second.cpus  # inflating keeps the CPUs it had
    check_invariants(p)


def test_a_balloon_deflates_when_containers_leave() -> None:
    p = balloons([{"name": "grow", "namespaces": ["*"], "maxBalloons": 1}])
    p.admit(req("a", 1000))
    big = p.admit(req("b", 3000)).cpus
    p.release(key("b"))
    left = p.placement(key("a")).cpus
    assert len(left) == 1 and left < big
    check_invariants(p)


def test_inflating_takes_the_nearest_free_cpus() -> None:
    p = balloons([{"name": "grow", "namespaces": ["*"], "maxBalloons": 1}], reserved="7,15")
    one = p.admit(req("a", 1000)).cpus
    two = p.admit(req("b", 1000)).cpus
    # The sibling thread of the CPU it had: a whole core.
    assert len(two) == 2 and two in MACHINE.cores()
    four = p.admit(req("c", 2000)).cpus
    assert one < two < four
    # Node 3 had only that core free (7,15 are reserved): the rest comes from its socket,
    # as a whole core.
    assert MACHINE.sockets_of_cpus(four) == {1}
    assert all(core <= four or not core & four for core in MACHINE.cores())


def test_minimum_and_maximum_cpus_are_kept() -> None:
    p = balloons([{"name": "b", "namespaces": ["*"], "minCPUs": 2, "maxCPUs": 3}])
    assert len(p.admit(req("tiny", 100)).cpus) == 2  # never below minCPUs
    assert len(p.admit(req("more", 900)).cpus) == 2
    assert len(p.admit(req("again", 1100)).cpus) == 3
    # 3 CPUs is the most a balloon of this type may have: the next goes to a new balloon.
    assert p.admit(req("next", 1000)).pool == "b[1]"
    check_invariants(p)


def test_a_request_above_max_cpus_is_refused_naming_the_type_and_its_limits() -> None:
    p = balloons([{"name": "small", "namespaces": ["*"], "maxCPUs": 2, "maxBalloons": 3}])
    with pytest.raises(PlacementError) as err:
        p.admit(req("huge", 2500))
    message = str(err.value)
    assert err.value.reason is Reason.NO_ROOM
    assert "balloon type small" in message and "maxCPUs 2" in message
    assert "maxBalloons 3" in message and "needs 3 CPUs" in message


def test_max_balloons_bounds_the_count_and_is_named_when_reached() -> None:
    p = balloons([{"name": "one", "namespaces": ["*"], "maxCPUs": 2, "maxBalloons": 2}])
    p.admit(req("a", 2000))
    p.admit(req("b", 2000))
    with pytest.raises(PlacementError, match="maxBalloons 2 are in use"):
        p.admit(req("c", 1000))
    check_invariants(p)


def test_a_refusal_changes_nothing() -> None:
    p = balloons([{"name": "one", "namespaces": ["*"], "maxCPUs": 2, "maxBalloons": 1}])
    p.admit(req("a", 1000))
    before = by_name(p)
    with pytest.raises(PlacementError):
        p.admit(req("a", 3000))  # a resize that does not fit: the old decision stays
    assert by_name(p) == before and p.placement(key("a")).cpus == before["one[0]"]


def test_min_balloons_exist_from_the_start_even_empty() -> None:
    p = balloons([{"name": "warm", "minCPUs": 2, "minBalloons": 2}])
    views = [v for v in p.balloon_views() if v.type == "warm"]
    assert [v.name for v in views] == ["warm[0]", "warm[1]"]
    assert all(len(v.cpus) == 2 and not v.containers for v in views)
    check_invariants(p)


def test_min_balloons_that_do_not_fit_are_a_configuration_error_naming_the_type() -> None:
    with pytest.raises(ConfigError) as err:
        balloons([{"name": "greedy", "minCPUs": 8, "minBalloons": 2}])
    (problem,) = err.value.problems
    assert problem.startswith("policy.balloonTypes.0.minBalloons: 2 balloons of type greedy")


def test_an_empty_balloon_goes_unless_min_balloons_keeps_it() -> None:
    p = balloons(
        [
            {"name": "kept", "namespaces": ["k"], "minBalloons": 1, "minCPUs": 1},
            {"name": "gone", "namespaces": ["g"]},
        ]
    )
    p.admit(req("a", 1000, namespace="k"))
    p.admit(req("b", 1000, namespace="g"))
    p.release(key("a"))
    p.release(key("b"))
    names = by_name(p)
    assert "kept[0]" in names and len(names["kept[0]"]) == 1
    assert "gone[0]" not in names


def test_type_from_annotation_then_namespace_then_default() -> None:
    p = balloons(
        [
            {"name": "ai", "namespaces": ["ai-*"]},
            {"name": "ai-too", "namespaces": ["ai-*", "ml"]},
            {"name": "batch"},
        ]
    )
    assert p.admit(req("x", 500, namespace="ai-train", balloon="batch")).pool == "batch[0]"
    assert p.admit(req("y", 500, namespace="ai-train")).pool == "ai[0]"  # the first match
    assert p.admit(req("z", 500, namespace="ml")).pool == "ai-too[0]"
    assert p.admit(req("w", 500, namespace="web")).pool == "default[0]"


def test_the_builtin_default_type_shares_the_idle_cpus() -> None:
    p = balloons([{"name": "ai", "namespaces": ["ai"], "maxBalloons": 1}])
    p.admit(req("model", 2000, namespace="ai"))
    batch = p.admit(req("batch", 0, namespace="web"))
    # One CPU of its own, and every CPU that is in no balloon.
    idle = p.available - p.reserved - by_name(p)["ai[0]"]
    assert batch.pool == "default[0]" and batch.cpus == idle
    assert len(by_name(p)["default[0]"]) == 1


def test_an_explicit_default_type_replaces_the_builtin_one() -> None:
    p = balloons([{"name": "default", "maxCPUs": 2}, {"name": "ai", "namespaces": ["ai"]}])
    assert list(p.types) == ["reserved", "ai", "default"]  # default is still the last resort
    placed = p.admit(req("w", 1000, namespace="web"))
    assert placed.pool == "default[0]" and len(placed.cpus) == 1  # no idle CPUs shared
    with pytest.raises(PlacementError, match="balloon type default"):
        p.admit(req("big", 3000, namespace="web"))


def test_kube_system_and_reserved_namespaces_go_to_the_reserved_balloon() -> None:
    p = balloons(
        [{"name": "reserved", "namespaces": ["infra-*"]}, {"name": "all", "namespaces": ["*"]}],
        reservedNamespaces=["kube-system", "monitoring"],
    )
    for ns in ("kube-system", "monitoring", "infra-dns"):
        placed = p.admit(req(f"c-{ns}", 100, namespace=ns))
        assert (placed.kind, placed.pool, placed.cpus) == ("reserved", "reserved[0]", p.reserved)
    # prefer-reserved-cpus overrides the namespace either way.
    assert p.admit(req("opt-in", 100, namespace="web", reserved=True)).pool == "reserved[0]"
    assert p.admit(req("opt-out", 100, namespace="kube-system", reserved=False)).pool == "all[0]"


def test_an_unknown_type_is_refused_naming_the_configured_ones() -> None:
    p = balloons([{"name": "ai"}])
    with pytest.raises(PlacementError) as err:
        p.admit(req("x", 100, balloon="gpu"))
    assert err.value.reason is Reason.BAD_REQUEST
    assert "'gpu'" in str(err.value) and "reserved, ai, default" in str(err.value)


def test_an_existing_balloon_with_room_before_inflating_before_a_new_one() -> None:
    p = balloons([{"name": "t", "namespaces": ["*"], "minCPUs": 2, "maxCPUs": 4}])
    assert p.admit(req("a", 500)).pool == "t[0]"
    assert p.admit(req("b", 500)).pool == "t[0]"  # room already: no inflation
    assert len(by_name(p)["t[0]"]) == 2
    assert p.admit(req("c", 2000)).pool == "t[0]"  # inflates to 3 rather than a new balloon
    assert len(by_name(p)["t[0]"]) == 3
    assert p.admit(req("d", 2000)).pool == "t[1]"  # 5 CPUs would break maxCPUs: a new one


def test_containers_of_a_pod_stay_together_by_default() -> None:
    p = balloons([{"name": "t", "namespaces": ["*"], "minBalloons": 2, "minCPUs": 1}])
    assert p.admit(req("a", 500, pod="p1")).pool == "t[0]"
    assert p.admit(req("x", 500, pod="p2")).pool == "t[1]"  # the most free CPU (balanced)
    # Both have 500m free now; the first would win a tie, but the pod's balloon comes first.
    p.admit(req("b", 400, pod="p2"))
    assert p.placement(key("b", "p2")).pool == "t[1]"
    # Too big for t[1] without inflating: it inflates rather than leave the pod.
    assert p.admit(req("c", 900, pod="p2")).pool == "t[1]"


def test_prefer_spreading_pods_puts_a_pods_containers_in_different_balloons() -> None:
    p = balloons([{"name": "t", "namespaces": ["*"], "preferSpreadingPods": True}])
    pools = {p.admit(req(f"c{i}", 500, pod="p")).pool for i in range(3)}
    assert pools == {"t[0]", "t[1]", "t[2]"}
    assert p.admit(req("other", 500, pod="q")).pool in pools  # other pods fill them
    check_invariants(p)


def test_prefer_per_namespace_balloon() -> None:
    p = balloons([{"name": "t", "namespaces": ["*"], "preferPerNamespaceBalloon": True}])
    a = p.admit(req("a", 500, namespace="team-a")).pool
    b = p.admit(req("b", 500, namespace="team-b")).pool
    assert a != b  # another namespace's balloon is avoided while a new one can be made
    assert p.admit(req("a2", 200, namespace="team-a")).pool == a


def test_prefer_new_balloons() -> None:
    p = balloons([{"name": "t", "namespaces": ["*"], "preferNewBalloons": True, "maxBalloons": 3}])
    pools = [p.admit(req(f"c{i}", 500)).pool for i in range(4)]
    assert pools[:3] == ["t[0]", "t[1]", "t[2]"]
    assert pools[3] in pools[:3]  # maxBalloons reached: an existing one takes it


@pytest.mark.parametrize(
    ("level", "expected"),
    [
        ("system", "0-5,7-13"),  # every idle CPU
        ("package", "4-5,7,12-13"),  # socket 1
        ("die", "4-5,7,12-13"),  # one die per socket here
        ("numa", "7"),  # node 3
        ("core", ""),  # no idle thread beside the balloon's core
    ],
)
def test_share_idle_cpus_in_same(level: str, expected: str) -> None:
    p = balloons(
        [{"name": "s", "namespaces": ["*"], "shareIdleCPUsInSame": level, "maxBalloons": 1}],
        reserved="15",
    )
    # The balloon takes the whole core {6,14}, in node 3 of socket 1 (the fullest node).
    placed = p.admit(req("a", 2000))
    assert by_name(p)["s[0]"] == cpus("6,14")
    assert placed.cpus == cpus("6,14") | cpus(expected)


def test_share_idle_cpus_in_the_same_core() -> None:
    p = balloons(
        [{"name": "s", "namespaces": ["*"], "shareIdleCPUsInSame": "core", "maxBalloons": 1}],
        reserved="0,8",
    )
    placed = p.admit(req("a", 1000))
    (own,) = by_name(p)["s[0]"]
    assert placed.cpus == MACHINE.siblings(own)  # its sibling thread, idle, is shared


def test_allocator_priority_orders_who_gets_cpus_first() -> None:
    # 14 free CPUs: the high-priority type's balloons are made first, wherever it is listed.
    types = [
        {"name": "low", "minBalloons": 1, "minCPUs": 4, "allocatorPriority": "low"},
        {"name": "high", "minBalloons": 1, "minCPUs": 4, "allocatorPriority": "high"},
    ]
    p = balloons(types)
    # Made first: high takes the first whole NUMA node with room (node 1), low the next.
    assert by_name(p)["high[0]"] == MACHINE.cpus_of_node(1)
    assert by_name(p)["low[0]"] == MACHINE.cpus_of_node(2)


def test_a_new_balloon_comes_from_the_smallest_unit_with_room_on_whole_cores() -> None:
    p = balloons(
        [{"name": "t", "namespaces": ["t"]}, {"name": "q", "namespaces": ["q"]}], reserved="0"
    )
    placed = p.admit(req("a", 2000, namespace="t")).cpus
    # CPU 8 is a lone thread (its sibling is reserved): the balloon takes a whole core instead.
    assert placed in MACHINE.cores() and len(MACHINE.nodes_of_cpus(placed)) == 1
    four = p.admit(req("b", 4000, namespace="q")).cpus
    assert len(MACHINE.nodes_of_cpus(four)) == 1  # a whole NUMA node


def test_memory_follows_the_balloons_cpus_unless_pin_memory_is_off() -> None:
    p = balloons(
        [
            {"name": "pinned", "namespaces": ["p"]},
            {"name": "loose", "namespaces": ["l"], "pinMemory": False},
        ]
    )
    pinned = p.admit(req("a", 1000, namespace="p"))
    assert pinned.mems == MACHINE.memory_nodes_of_cpus(pinned.cpus)
    assert p.admit(req("b", 1000, namespace="l")).mems is None


def test_cpu_classes_follow_the_balloons_cpus() -> None:
    p = balloons(
        [{"name": "fast", "namespaces": ["*"], "cpuClass": "turbo"}],
        cpu_classes={"turbo": {"minFreq": 3000000}},
    )
    assert p.cpu_classes() == {}
    p.admit(req("a", 2000))
    assert p.cpu_classes() == dict.fromkeys(by_name(p)["fast[0]"], "turbo")


def test_preserved_containers_run_on_idle_and_reserved_cpus() -> None:
    p = balloons([{"name": "t", "namespaces": ["*"], "maxBalloons": 1}])
    p.admit(req("a", 2000))
    placed = p.admit(req("keep", 0, preserve=True))
    assert placed.kind == "preserved"
    assert placed.cpus == p.available - by_name(p)["t[0]"]


def test_saved_state_restores_the_same_balloons() -> None:
    types = [{"name": "t", "namespaces": ["*"], "maxCPUs": 4}]
    p = balloons(types)
    for i in range(3):
        p.admit(req(f"c{i}", 1500, pod=f"p{i % 2}"))
    state = p.to_state()
    again = balloons(types)
    assert again.restore(state) == []
    assert by_name(again) == by_name(p)
    assert {k: again.placement(k) for k in p.admitted} == {k: p.placement(k) for k in p.admitted}


@pytest.mark.parametrize(
    "damaged",
    [
        1,  # once a TypeError: no start (every entry lost), `status` crashed
        "t",
        {"type": "t"},
        [{"type": "t", "instance": "0", "cpus": "0-1"}],  # once read as instance 0
        [{"type": "t", "instance": True, "cpus": "0-1"}],
        [{"type": ["t"], "instance": 0, "cpus": "0-1"}],  # once read as the type "['t']"
    ],
)
def test_damaged_saved_balloons_are_named_and_the_containers_still_placed(
    damaged: object,
) -> None:
    types = [{"name": "t", "namespaces": ["*"], "maxCPUs": 4}]
    p = balloons(types)
    for i in range(3):
        p.admit(req(f"c{i}", 1500, pod=f"p{i % 2}"))
    again = balloons(types)
    problems = again.restore({**p.to_state(), "balloons": damaged})
    assert len(problems) == 1 and "unreadable" in problems[0]
    assert set(again.admitted) == set(p.admitted)
    check_invariants(again)


def test_rollback_reinstates_a_container_into_its_balloon() -> None:
    p = balloons([{"name": "t", "namespaces": ["*"]}])
    p.admit(req("a", 1000))
    entry = p.release(key("a"))
    assert entry is not None and "t[0]" not in by_name(p)
    p.reinstate(entry)
    assert p.placement(key("a")).pool == "t[0]" and len(by_name(p)["t[0]"]) == 1
    check_invariants(p)


def test_a_machine_without_reserved_cpus_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"policy\.reservedCPUs"):
        balloons([], topology=Topology.synthetic(cores_per_node=2), reserved=0)
