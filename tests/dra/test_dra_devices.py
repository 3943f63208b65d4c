"""The driver's devices: which CPUs a node offers, with which attributes, in either mode, and
how a pool is cut into ResourceSlices."""

from __future__ import annotations

import pytest

from enforcer.dra.devices import (
    MAX_DEVICES_PER_SLICE,
    CPUDetails,
    allocatable_cpus,
    build_devices,
    cpu_device_name,
    cpu_of_device,
    node_device_name,
    node_of_device,
    slice_specs,
)
from enforcer.topology import CPUSet, Topology

# 2 sockets x 1 node x 2 cores x 2 threads: CPUs 0-3 first threads, 4-7 their siblings.
TWO_NODES = Topology.synthetic(sockets=2, cores_per_node=2, threads_per_core=2, isolated="3,7")


def _ints(device: dict[str, object], *names: str) -> list[object]:
    attributes = device["attributes"]
    assert isinstance(attributes, dict)
    return [next(iter(attributes[n].values())) for n in names]


def test_individual_mode_offers_every_allocatable_cpu_with_the_anchor_attributes() -> None:
    allocatable = allocatable_cpus(TWO_NODES.online, reserved=CPUSet.of(0), held=CPUSet.of(5))
    assert allocatable == CPUSet.parse("1-4,6-7")
    details = {1: CPUDetails(l2_group=1, core_type="p-core"), 2: CPUDetails(core_type="e-core")}
    devices = build_devices(TWO_NODES, allocatable, "individual", details, {6: "turbo"})
    assert [d["name"] for d in devices] == ["cpu-1", "cpu-2", "cpu-3", "cpu-4", "cpu-6", "cpu-7"]
    by_name = {d["name"]: d for d in devices}
    # CPU 6: second thread of core 2 (CPUs 2 and 6), socket 1, node 1.
    six = by_name["cpu-6"]
    assert _ints(six, "cpuID", "coreID", "socketID", "numaNode", "die") == [6, 2, 1, 1, 0]
    assert six["attributes"]["resource.kubernetes.io/numaNode"] == {"int": 1}
    assert six["attributes"]["cacheL3ID"] == {"int": 1}
    assert six["attributes"]["cpuClass"] == {"string": "turbo"}
    assert six["attributes"]["smtEnabled"] == {"bool": True}
    assert six["attributes"]["l2Group"] == {"int": 2}  # unknown L2: the core
    assert six["attributes"]["coreType"] == {"string": "standard"}
    assert by_name["cpu-1"]["attributes"]["coreType"] == {"string": "p-core"}
    assert by_name["cpu-2"]["attributes"]["coreType"] == {"string": "e-core"}
    assert by_name["cpu-3"]["attributes"]["isolated"] == {"bool": True}
    assert by_name["cpu-4"]["attributes"]["isolated"] == {"bool": False}
    assert "cpuClass" not in by_name["cpu-4"]["attributes"]
    assert all("capacity" not in d and "allowMultipleAllocations" not in d for d in devices)


def test_individual_mode_ignores_cpus_that_are_not_online_and_unknown_core_types() -> None:
    devices = build_devices(
        TWO_NODES, CPUSet.of(1, 99), "individual", {1: CPUDetails(core_type="x-core")}
    )
    assert [d["name"] for d in devices] == ["cpu-1"]
    assert devices[0]["attributes"]["coreType"] == {"string": "standard"}


def test_grouped_mode_offers_one_shareable_device_per_node_with_its_cpus_as_capacity() -> None:
    allocatable = allocatable_cpus(TWO_NODES.online, reserved=CPUSet.of(0, 4))
    devices = build_devices(TWO_NODES, allocatable, "grouped")
    assert [d["name"] for d in devices] == ["numa-0", "numa-1"]
    node0, node1 = devices
    assert node0["allowMultipleAllocations"] is True
    assert node0["capacity"]["cpu"]["value"] == "2"  # CPUs 1 and 5
    assert node1["capacity"]["cpu"]["value"] == "4"
    assert node0["capacity"]["cpu"]["requestPolicy"] == {
        "default": "1",
        "validRange": {"min": "1", "max": "2", "step": "1"},
    }
    assert _ints(node1, "numaNode", "socketID", "numCPUs") == [1, 1, 4]
    assert node1["attributes"]["resource.kubernetes.io/numaNode"] == {"int": 1}


def test_a_group_of_one_cpu_has_a_range_without_a_step() -> None:
    # The API server (1.37) refuses a validRange whose min plus one step passes the capacity
    # ("one step 2 is larger than capacity value: 1"): a 2-CPU node with CPU 0 reserved.
    (device,) = build_devices(TWO_NODES, CPUSet.of(1), "grouped")
    assert device["capacity"]["cpu"] == {
        "value": "1",
        "requestPolicy": {"default": "1", "validRange": {"min": "1", "max": "1"}},
    }


def test_grouped_mode_leaves_out_a_node_with_nothing_to_offer() -> None:
    devices = build_devices(TWO_NODES, TWO_NODES.cpus_of_node(1), "grouped")
    assert [d["name"] for d in devices] == ["numa-1"]


def test_a_single_thread_machine_says_smt_is_off() -> None:
    one = Topology.synthetic(cores_per_node=2, threads_per_core=1)
    devices = build_devices(one, one.online, "individual") + build_devices(
        one, one.online, "grouped"
    )
    assert {str(d["attributes"]["smtEnabled"]) for d in devices} == {"{'bool': False}"}


def test_an_unknown_mode_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r'dra.mode: "mixed"'):
        build_devices(TWO_NODES, TWO_NODES.online, "mixed")  # type: ignore[arg-type]


def test_device_names_round_trip_and_other_names_are_not_ours() -> None:
    assert cpu_of_device(cpu_device_name(17)) == 17
    assert node_of_device(node_device_name(3)) == 3
    for name in ("cpu-", "cpu-01", "cpu--1", "cpu-1x", "numa-0", "gpu-0", "cpu-٣", "cpu-9999999"):
        assert cpu_of_device(name) is None, name
    assert node_of_device("cpu-0") is None


def test_a_pool_of_many_cpus_is_cut_into_slices_of_at_most_128_devices() -> None:
    big = Topology.synthetic(sockets=2, cores_per_node=80, threads_per_core=2)  # 320 CPUs
    devices = build_devices(big, big.online, "individual")
    specs = slice_specs("node-a", devices, generation=7)
    assert [len(s["devices"]) for s in specs] == [MAX_DEVICES_PER_SLICE, MAX_DEVICES_PER_SLICE, 64]
    assert {(s["pool"]["name"], s["pool"]["generation"]) for s in specs} == {("node-a", 7)}
    assert {s["pool"]["resourceSliceCount"] for s in specs} == {3}
    owners = {(s["driver"], s["nodeName"]) for s in specs}
    assert owners == {("cpu.resource-enforcer.dev", "node-a")}
    names = [d["name"] for s in specs for d in s["devices"]]
    assert len(set(names)) == 320


def test_an_empty_pool_is_one_slice_without_devices() -> None:
    specs = slice_specs("node-a", [], generation=1)
    assert len(specs) == 1 and specs[0]["devices"] == []
    assert specs[0]["pool"]["resourceSliceCount"] == 1
