"""The claim simulation `plan` runs: what the scheduler would allocate for ResourceClaims over
ResourceSlice devices (counts, allocationMode, CEL selectors, matchAttribute across drivers,
firstAvailable, consumable capacity) and the messages of what cannot be allocated."""

from __future__ import annotations

from typing import Any

import pytest

from enforcer.claims.allocate import Allocator, Unsatisfiable
from enforcer.claims.model import ClaimInputError, DeviceClass, claim_spec, devices_of_slice

CPU = "cpu.resource-enforcer.dev"
GPU = "gpu.example.com"
STD = "resource.kubernetes.io"


def cpu_slice(cpus: range, per_node: int = 4) -> dict[str, Any]:
    return {
        "driver": CPU,
        "pool": {"name": "node1"},
        "devices": [
            {
                "name": f"cpu-{c}",
                "attributes": {
                    "cpuID": {"int": c},
                    "numaNode": {"int": c // per_node},
                    f"{STD}/numaNode": {"int": c // per_node},
                    "isolated": {"bool": c % 2 == 1},
                },
            }
            for c in cpus
        ],
    }


def gpu_slice() -> dict[str, Any]:
    return {
        "driver": GPU,
        "pool": {"name": "node1"},
        "devices": [
            {
                "name": f"gpu-{g}",
                "attributes": {
                    f"{STD}/numaNode": {"int": g},
                    f"{STD}/pcieRoot": {"string": f"pci0000:{g}0"},
                    "driverVersion": {"version": "1.2.3"},
                },
            }
            for g in range(2)
        ],
    }


def grouped_slice(counts: dict[int, int]) -> dict[str, Any]:
    return {
        "driver": CPU,
        "pool": {"name": "node1"},
        "devices": [
            {
                "name": f"numa-{n}",
                "allowMultipleAllocations": True,
                "attributes": {"numaNode": {"int": n}, f"{STD}/numaNode": {"int": n}},
                "capacity": {
                    "cpu": {
                        "value": str(k),
                        "requestPolicy": {
                            "default": "1",
                            "validRange": {"min": "1", "max": str(k), "step": "1"},
                        },
                    }
                },
            }
            for n, k in counts.items()
        ],
    }


CLASSES = {
    CPU: DeviceClass(CPU, (f'device.driver == "{CPU}"',)),
    "gpu": DeviceClass("gpu", (f'device.driver == "{GPU}"',)),
}


def allocator(*slices: dict[str, Any]) -> Allocator:
    devices = [d for i, s in enumerate(slices) for d in devices_of_slice(s, f"slice[{i}]")]
    return Allocator(devices, CLASSES)


def request(name: str, cls: str = CPU, count: int | None = None, **extra: Any) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": cls, **extra}
    if count is not None:
        exactly["count"] = count
    return {"name": name, "exactly": exactly}


def cel(expression: str) -> list[dict[str, Any]]:
    return [{"cel": {"expression": expression}}]


def claim(*requests: dict[str, Any], constraints: list[dict[str, Any]] | None = None) -> Any:
    devices: dict[str, Any] = {"requests": list(requests)}
    if constraints:
        devices["constraints"] = constraints
    return claim_spec({"devices": devices}, "spec")


def names(allocated: list[Any]) -> list[tuple[str, str]]:
    return [(a.request, a.device.name) for a in allocated]


def test_exact_count_takes_free_devices_in_slice_order_and_holds_them() -> None:
    a = allocator(cpu_slice(range(2, 8)))
    assert names(a.allocate(claim(request("cpus", count=2)))) == [
        ("cpus", "cpu-2"),
        ("cpus", "cpu-3"),
    ]
    assert names(a.allocate(claim(request("cpus", count=3)))) == [
        ("cpus", "cpu-4"),
        ("cpus", "cpu-5"),
        ("cpus", "cpu-6"),
    ]
    with pytest.raises(
        Unsatisfiable,
        match=r"request 'cpus' asks for 2 devices .*6 match its selectors, 1 of them free",
    ):
        a.allocate(claim(request("cpus", count=2)))
    # A claim that failed holds nothing: the last CPU is still there.
    assert names(a.allocate(claim(request("one")))) == [("one", "cpu-7")]


def test_selectors_read_our_attributes() -> None:
    a = allocator(cpu_slice(range(2, 12)))
    got = a.allocate(
        claim(
            request(
                "cpus",
                count=2,
                selectors=cel(
                    f'device.attributes["{CPU}"].numaNode == 2'
                    f' && !device.attributes["{CPU}"].isolated'
                ),
            )
        )
    )
    assert names(got) == [("cpus", "cpu-8"), ("cpus", "cpu-10")]


def test_cpus_aligned_with_a_gpu_of_another_driver_by_numa_node() -> None:
    a = allocator(cpu_slice(range(2, 8)), gpu_slice())
    aligned = claim(
        request("gpu", "gpu", selectors=cel(f'device.attributes["{STD}"].numaNode == 1')),
        request("cpus", count=2),
        constraints=[{"matchAttribute": f"{STD}/numaNode"}],
    )
    got = names(a.allocate(aligned))
    # Without the constraint the first free CPUs (2, 3 on node 0) would be taken.
    assert got == [("gpu", "gpu-1"), ("cpus", "cpu-4"), ("cpus", "cpu-5")]


def test_alignment_backtracks_to_the_gpu_whose_node_has_room() -> None:
    a = allocator(cpu_slice(range(2, 8)), gpu_slice())
    a.allocate(claim(request("cpus", count=2)))  # node 0's CPUs 2, 3: none left there
    got = names(
        a.allocate(
            claim(
                request("gpu", "gpu"),
                request("cpus", count=2),
                constraints=[{"requests": ["gpu", "cpus"], "matchAttribute": f"{STD}/numaNode"}],
            )
        )
    )
    assert got == [("gpu", "gpu-1"), ("cpus", "cpu-4"), ("cpus", "cpu-5")]


def test_a_constraint_on_an_attribute_our_cpus_lack_is_unsatisfiable_naming_it() -> None:
    a = allocator(cpu_slice(range(2, 8)), gpu_slice())
    with pytest.raises(Unsatisfiable, match=rf"matchAttribute {STD}/pcieRoot over gpu, cpus"):
        a.allocate(
            claim(
                request("gpu", "gpu"),
                request("cpus", count=1),
                constraints=[{"requests": ["gpu", "cpus"], "matchAttribute": f"{STD}/pcieRoot"}],
            )
        )


def test_first_available_falls_back_to_the_next_subrequest() -> None:
    a = allocator(cpu_slice(range(2, 8)))
    spec = claim(
        {
            "name": "cpus",
            "firstAvailable": [
                {"name": "eight", "deviceClassName": CPU, "count": 8},
                {"name": "four", "deviceClassName": CPU, "count": 4},
            ],
        }
    )
    got = names(a.allocate(spec))
    assert got == [("cpus/four", f"cpu-{c}") for c in range(2, 6)]


def test_allocation_mode_all_takes_every_match_or_nothing() -> None:
    a = allocator(cpu_slice(range(2, 10)))
    node1 = cel(f'device.attributes["{CPU}"].numaNode == 1')
    got = a.allocate(claim(request("node", selectors=node1, allocationMode="All")))
    assert [x.device.name for x in got] == ["cpu-4", "cpu-5", "cpu-6", "cpu-7"]
    with pytest.raises(
        Unsatisfiable, match=r"allocationMode All.*4 devices match, 4 of them already"
    ):
        a.allocate(claim(request("node", selectors=node1, allocationMode="All")))


def test_grouped_mode_consumes_capacity_of_a_shared_numa_device() -> None:
    a = allocator(grouped_slice({0: 3, 1: 4}))
    two = {"requests": {"cpu": "2"}}
    assert names(a.allocate(claim(request("cpus", capacity=two)))) == [("cpus", "numa-0")]
    # numa-0 has 1 CPU left: the next 2 go to numa-1, twice, then nothing has 2.
    assert names(a.allocate(claim(request("cpus", capacity=two)))) == [("cpus", "numa-1")]
    assert names(a.allocate(claim(request("cpus", capacity=two)))) == [("cpus", "numa-1")]
    with pytest.raises(
        Unsatisfiable,
        match=r"request 'cpus' .*capacity cpu=2: 2 match its selectors, 0 of them free",
    ):
        a.allocate(claim(request("cpus", capacity=two)))
    # Without a capacity request the policy's default (1) is taken.
    got = a.allocate(claim(request("one")))
    assert names(got) == [("one", "numa-0")] and str(got[0].consumed[f"{CPU}/cpu"]) == "1"


def test_grouped_mode_refuses_more_than_a_group_holds() -> None:
    a = allocator(grouped_slice({0: 3, 1: 4}))
    with pytest.raises(Unsatisfiable, match=r"capacity cpu=5: 0 match its selectors"):
        a.allocate(claim(request("cpus", capacity={"requests": {"cpu": "5"}})))


def test_quantity_and_semver_functions() -> None:
    a = allocator(grouped_slice({0: 3, 1: 4}), gpu_slice())
    big = cel(f'device.capacity["{CPU}"].cpu.isGreaterThan(quantity("3"))')
    assert names(a.allocate(claim(request("cpus", selectors=big)))) == [("cpus", "numa-1")]
    new = cel(f'device.attributes["{GPU}"].driverVersion.isGreaterThan(semver("1.10.0"))')
    with pytest.raises(Unsatisfiable, match="0 match its selectors"):
        a.allocate(claim(request("gpu", "gpu", selectors=new)))


def test_a_domain_the_device_lacks_reads_as_empty() -> None:
    a = allocator(cpu_slice(range(2, 4)))
    guarded = cel(f'!("numaNode" in device.attributes["{GPU}"])')
    assert len(a.allocate(claim(request("cpus", count=2, selectors=guarded)))) == 2


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("device.driver ==", "does not compile"),
        (f'device.attributes["{CPU}"].noSuch == 1', "no such member"),
        ('device.driver.lowerAscii() == "x"', "'lowerAscii' is not supported"),
        ("device.driver", "not a bool"),
    ],
)
def test_a_failing_selector_aborts_the_claim_naming_request_device_and_expression(
    expression: str, message: str
) -> None:
    a = allocator(cpu_slice(range(2, 4)))
    with pytest.raises(
        Unsatisfiable, match=rf"request 'cpus': device {CPU}/node1/cpu-2: .*{message}"
    ):
        a.allocate(claim(request("cpus", selectors=cel(expression))))


def test_an_unknown_device_class_names_the_request() -> None:
    a = allocator(cpu_slice(range(2, 4)))
    with pytest.raises(
        ClaimInputError, match="request 'x': deviceClassName: no DeviceClass named 'nope'"
    ):
        a.allocate(claim(request("x", "nope")))


@pytest.mark.parametrize(
    ("devices", "field"),
    [
        ({"requests": []}, "spec.devices.requests: a claim needs"),
        ({"requests": [request("cpus", count=0)]}, r"spec.devices.requests\[0\].exactly.count"),
        ({"requests": [{"name": "cpus", "exactly": {}}]}, r"requests\[0\].exactly.deviceClassName"),
        ({"requests": [request("Cpus")]}, r"requests\[0\].name: 'Cpus' is not a DNS label"),
        ({"requests": [request("a"), request("a")]}, r"requests\[1\].name: 'a' is given twice"),
        (
            {"requests": [{"name": "a"}]},
            r"requests\[0\]: exactly one of exactly and firstAvailable",
        ),
        ({"requests": [request("a", allocationMode="Some")]}, r"exactly.allocationMode"),
        ({"requests": [request("a", allocationMode="All", count=2)]}, r"exactly.count: must not"),
        (
            {"requests": [request("a", capacity={"requests": {"cpu": "x"}})]},
            r"capacity.requests.cpu",
        ),
        ({"requests": [request("a", selectors=[{"cel": {}}])]}, r"selectors\[0\].cel.expression"),
        (
            {"requests": [request("a")], "constraints": [{"matchAttribute": "numaNode"}]},
            r"constraints\[0\].matchAttribute: 'numaNode' needs a domain",
        ),
        (
            {
                "requests": [request("a")],
                "constraints": [{"requests": ["b"], "matchAttribute": "x.io/y"}],
            },
            r"constraints\[0\].requests\[0\]: no request named 'b'",
        ),
        ({"requests": "cpus"}, "spec.devices.requests: expected a list"),
    ],
)
def test_bad_claims_name_the_field(devices: dict[str, Any], field: str) -> None:
    with pytest.raises(ClaimInputError, match=field):
        claim_spec({"devices": devices}, "spec")


def test_bad_slice_names_the_field() -> None:
    bad = cpu_slice(range(2, 3))
    bad["devices"][0]["attributes"]["cpuID"] = {"int": "2"}
    with pytest.raises(
        ClaimInputError, match=r"slice\[0\].devices\[0\].attributes.cpuID.int: wrong type str"
    ):
        allocator(bad)
