"""Preparing a claim: the CPUs a claim gets in either mode, its classes, and every refusal
naming the field or the holder."""

from __future__ import annotations

from typing import Any

import pytest

from enforcer.dra.claims import (
    ClaimClasses,
    ClaimError,
    ClassRules,
    PreparedClaim,
    prepare_claim,
)
from enforcer.topology import CPUSet, Topology

DRIVER = "cpu.resource-enforcer.dev"
# 2 nodes x 2 cores x 2 threads: node 0 = CPUs 0,1,4,5 (cores 0: 0+4, 1: 1+5); node 1 = 2,3,6,7.
TOPO = Topology.synthetic(sockets=2, cores_per_node=2, threads_per_core=2)
OFFERED = TOPO.online - CPUSet.of(0)
RULES = ClassRules(
    configured={"rdt": frozenset({"gold"}), "blockio": frozenset({"slow"}), "cpu": frozenset()},
    access={"rdt": {"gold": ("prod-*",)}},
)


def claim(*results: dict[str, Any], config: list[Any] | None = None, ns: str = "prod-a") -> dict:
    return {
        "metadata": {"namespace": ns, "name": "c1", "uid": "uid-1"},
        "status": {"allocation": {"devices": {"results": list(results), "config": config or []}}},
    }


def result(device: str, **extra: Any) -> dict[str, Any]:
    return {"request": "cpus", "driver": DRIVER, "pool": "node-a", "device": device, **extra}


def prepare(data: dict[str, Any], holders: dict[int, str] | None = None) -> PreparedClaim:
    return prepare_claim(
        data, node_name="node-a", topology=TOPO, offered=OFFERED, holders=holders or {}, rules=RULES
    )


def test_individual_claim_gets_exactly_its_devices_cpus_and_their_memory() -> None:
    gpu = {"request": "gpu", "driver": "gpu.example.com", "pool": "x", "device": "gpu-0"}
    prepared = prepare(claim(result("cpu-2"), result("cpu-6"), gpu))
    assert prepared.cpus == CPUSet.of(2, 6)
    assert prepared.mems == CPUSet.of(1)
    assert [d.device for d in prepared.devices] == ["cpu-2", "cpu-6"]
    assert PreparedClaim.from_dict(prepared.to_dict()) == prepared


def test_grouped_claim_gets_whole_cores_inside_its_node_around_the_holders() -> None:
    prepared = prepare(
        claim(result("numa-1", consumedCapacity={"cpu": "2"}, shareID="s1")),
        holders={3: "container default/p/c"},
    )
    assert prepared.cpus == CPUSet.of(2, 6)  # core 2 whole; CPU 3 is held
    assert prepared.devices[0].share_id == "s1"


def test_a_held_cpu_is_refused_naming_its_holder() -> None:
    with pytest.raises(ClaimError, match=r"claim prod-a/c1: device cpu-3: CPU 3 is held by "):
        prepare(claim(result("cpu-3")), holders={3: "container default/p/c"})


def test_a_reserved_cpu_is_refused() -> None:
    with pytest.raises(ClaimError, match="CPU 0 is not offered on this node"):
        prepare(claim(result("cpu-0")))


def test_a_grouped_claim_larger_than_its_node_is_refused_with_the_holders() -> None:
    with pytest.raises(ClaimError, match=r"asks for 4 CPUs of NUMA node 1, only 3 .*held by x"):
        prepare(claim(result("numa-1", consumedCapacity={"cpu": "4"})), holders={7: "x"})


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"metadata": {"namespace": "n", "name": "c", "uid": "u"}}, "not allocated"),
        (claim(result("cpu-1", pool="node-b")), r"results\[0\].pool is 'node-b': not this node"),
        (claim({**result("cpu-1"), "device": ""}), r"results\[0\].device is '', not a name"),
        (claim(result("gpu-1")), "device gpu-1 is not one of ours"),
        (claim(result("numa-1", consumedCapacity={"cpu": "1.5"})), "not a whole number"),
        (claim({**result("x"), "driver": "other"}), "no device of cpu.resource-enforcer.dev"),
    ],
)
def test_a_malformed_claim_is_refused_naming_the_field(data: dict, message: str) -> None:
    with pytest.raises(ClaimError, match=message):
        prepare(data)


def opaque(params: Any, driver: str = DRIVER) -> dict[str, Any]:
    return {"source": "FromClaim", "opaque": {"driver": driver, "parameters": params}}


def test_classes_ride_on_the_claims_opaque_configuration() -> None:
    config = [
        opaque({"apiVersion": f"{DRIVER}/v1", "kind": "CPUClaimParameters", "rdtClass": "gold"}),
        opaque({"blockioClass": "slow"}),
        opaque({"rdtClass": "ignored-other-driver"}, driver="gpu.example.com"),
    ]
    prepared = prepare(claim(result("cpu-1"), config=config))
    assert prepared.classes == ClaimClasses(rdt="gold", blockio="slow")


@pytest.mark.parametrize(
    ("params", "ns", "message"),
    [
        ({"rdtClass": "gold"}, "dev", r"rdtClass gold is not allowed in namespace dev"),
        ({"rdtClass": "silver"}, "prod-a", r"rdtClass silver is not configured"),
        ({"cpuClass": "../x"}, "prod-a", r"parameters.cpuClass: class name '../x' is malformed"),
        ({"memory": "1"}, "prod-a", r"parameters.memory: unknown key"),
        ({"kind": "Other"}, "prod-a", r"parameters.kind is 'Other', not CPUClaimParameters"),
        ("text", "prod-a", r"parameters is 'text', not an object"),
    ],
)
def test_a_class_the_claim_may_not_have_is_refused(params: Any, ns: str, message: str) -> None:
    with pytest.raises(ClaimError, match=message):
        prepare(claim(result("cpu-1"), config=[opaque(params)], ns=ns))


def test_a_damaged_saved_claim_names_the_field() -> None:
    with pytest.raises(ValueError, match="saved DRA claim is damaged: cpus is 3, not a string"):
        PreparedClaim.from_dict({"uid": "u", "namespace": "n", "name": "c", "cpus": 3})
