"""The DRA driver's devices: topology and configuration -> ResourceSlice devices and slices
(resource.k8s.io/v1 JSON shape) for the driver `cpu.resource-enforcer.dev`. Pure: no I/O.

Two modes (`dra.mode`):

- `individual`: one device `cpu-N` per allocatable CPU, i.e. online, in `policy.availableCPUs`,
  not in `policy.reservedCPUs` and not held exclusively by the enforcer's own policy at the time
  of publishing. Attributes, named as kubernetes-sigs/dra-driver-cpu names them (unqualified names
  belong to the driver's domain, so a selector reads
  `device.attributes["cpu.resource-enforcer.dev"].cpuID`): `cpuID`, `coreID`, `socketID`,
  `numaNode`, `cacheL3ID` (when the kernel reports an L3), `coreType` (`standard`, `p-core`,
  `e-core`), `smtEnabled`; the standard `resource.kubernetes.io/numaNode`; and ours: `die`,
  `l2Group` (the lowest CPU sharing the L2 cache; the core when unknown), `isolated` (in the
  kernel's isolcpus) and `cpuClass` (only when a CPU is fixed to a class).
- `grouped`: one device `numa-N` per NUMA node with allocatable CPUs, shareable
  (`allowMultipleAllocations`), with the consumable capacity `cpu` (its allocatable CPUs; a
  claim asks for whole CPUs, 1 by default) and the attributes `numaNode`,
  `resource.kubernetes.io/numaNode`, `socketID`, `numCPUs` and `smtEnabled`.

A ResourceSlice holds at most 128 devices, so `slice_specs` splits a pool into as many slices
as it needs, all with the pool's generation and count.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from enforcer.topology import CPUSet, Topology
from resource_contract.dra_config import DRA_DRIVER

Mode = Literal["individual", "grouped"]
MAX_DEVICES_PER_SLICE = 128  # resource.k8s.io/v1 ResourceSliceMaxDevices
STANDARD_NUMA = "resource.kubernetes.io/numaNode"
CAPACITY = "cpu"  # the grouped devices' consumable capacity (cpu.resource-enforcer.dev/cpu)
CORE_TYPES = ("standard", "p-core", "e-core")

_CPU_PREFIX = "cpu-"
_NODE_PREFIX = "numa-"


@dataclass(frozen=True)
class CPUDetails:
    """What the topology model does not hold about a CPU: its L2 group and core type."""

    l2_group: int | None = None
    core_type: str = "standard"


def allocatable_cpus(available: CPUSet, reserved: CPUSet, held: CPUSet | None = None) -> CPUSet:
    """The CPUs the driver may offer: available, not reserved, not held by our own policy."""
    return available - reserved - (held or CPUSet())


def cpu_device_name(cpu: int) -> str:
    return f"{_CPU_PREFIX}{cpu}"


def node_device_name(node: int) -> str:
    return f"{_NODE_PREFIX}{node}"


def cpu_of_device(name: str) -> int | None:
    """The CPU of an individual device's name (`cpu-3` -> 3); None for any other name."""
    return _number_after(name, _CPU_PREFIX)


def node_of_device(name: str) -> int | None:
    """The NUMA node of a grouped device's name (`numa-0` -> 0); None for any other name."""
    return _number_after(name, _NODE_PREFIX)


def _number_after(name: str, prefix: str) -> int | None:
    rest = name[len(prefix) :] if name.startswith(prefix) else ""
    if not rest.isascii() or not rest.isdigit() or len(rest) > 6 or rest != str(int(rest)):
        return None
    return int(rest)


def build_devices(
    topology: Topology,
    allocatable: CPUSet,
    mode: Mode,
    details: Mapping[int, CPUDetails] | None = None,
    cpu_classes: Mapping[int, str] | None = None,
) -> list[dict[str, Any]]:
    """The devices of this node's pool, sorted by name's number; CPUs not online are ignored."""
    offered = allocatable & topology.online
    smt = any(len(core) > 1 for core in topology.cores())
    if mode == "individual":
        return [
            _cpu_device(topology, cpu, smt, (details or {}).get(cpu), (cpu_classes or {}).get(cpu))
            for cpu in sorted(offered)
        ]
    if mode == "grouped":
        devices = []
        for node in topology.cpu_nodes():
            cpus = topology.cpus_of_node(node) & offered
            if cpus:
                devices.append(_node_device(topology, node, cpus, smt))
        return devices
    raise ValueError(f'dra.mode: "{mode}" is neither individual nor grouped')


def _cpu_device(
    topology: Topology, cpu: int, smt: bool, details: CPUDetails | None, cpu_class: str | None
) -> dict[str, Any]:
    info = topology.cpus[cpu]
    extra = details or CPUDetails()
    attributes: dict[str, dict[str, Any]] = {
        "cpuID": {"int": cpu},
        "coreID": {"int": info.core},
        "socketID": {"int": info.socket},
        "numaNode": {"int": info.node},
        STANDARD_NUMA: {"int": info.node},
        "coreType": {"string": extra.core_type if extra.core_type in CORE_TYPES else "standard"},
        "smtEnabled": {"bool": smt},
        "die": {"int": info.die},
        "l2Group": {"int": info.core if extra.l2_group is None else extra.l2_group},
        "isolated": {"bool": info.isolated},
    }
    if info.l3 is not None:
        attributes["cacheL3ID"] = {"int": info.l3}
    if cpu_class:
        attributes["cpuClass"] = {"string": cpu_class}
    return {"name": cpu_device_name(cpu), "attributes": dict(sorted(attributes.items()))}


def _node_device(topology: Topology, node: int, cpus: CPUSet, smt: bool) -> dict[str, Any]:
    first = topology.cpus[min(cpus)]
    count = str(len(cpus))
    # Whole CPUs: steps of 1 from 1. The API server refuses a step that does not fit once
    # above the minimum (min + step > value: "one step 2 is larger than capacity value: 1"),
    # so a group of one CPU has no step: its range, [1, 1], holds the one whole CPU anyway.
    valid_range = {"min": "1", "max": count}
    if len(cpus) > 1:
        valid_range["step"] = "1"
    return {
        "name": node_device_name(node),
        "allowMultipleAllocations": True,
        "attributes": {
            "numCPUs": {"int": len(cpus)},
            "numaNode": {"int": node},
            STANDARD_NUMA: {"int": node},
            "smtEnabled": {"bool": smt},
            "socketID": {"int": first.socket},
        },
        "capacity": {
            CAPACITY: {
                "value": count,
                "requestPolicy": {
                    "default": "1",
                    "validRange": valid_range,
                },
            }
        },
    }


def slice_specs(
    node_name: str, devices: list[dict[str, Any]], generation: int
) -> list[dict[str, Any]]:
    """The `spec`s of the pool's ResourceSlices (the pool is named after the node): devices in
    chunks of at most 128, every slice with the same generation and slice count. An empty pool
    is one slice without devices, so the scheduler learns the node has none to offer."""
    chunks = [
        devices[i : i + MAX_DEVICES_PER_SLICE]
        for i in range(0, len(devices), MAX_DEVICES_PER_SLICE)
    ] or [[]]
    return [
        {
            "driver": DRA_DRIVER,
            "nodeName": node_name,
            "pool": {
                "name": node_name,
                "generation": generation,
                "resourceSliceCount": len(chunks),
            },
            "devices": chunk,
        }
        for chunk in chunks
    ]
