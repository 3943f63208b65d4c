"""`policy.preferCloseToDevices`: exclusive CPUs and memory on the NUMA node(s) of a
container's devices, as the static and topology-aware policies apply it.

The devices and their NUMA nodes come in on the request (`ContainerRequest.devices`,
`device_nodes`), read from kubelet's pod-resources API by the shell before the decision. This
module only narrows the CPUs a policy may take: to those of the devices' nodes when the request
fits there, else not at all, with the reason the decision shows (`Policy.device_note`).
"""

from __future__ import annotations

from dataclasses import dataclass

from enforcer.decode import ContainerRequest
from enforcer.topology import CPUSet, Topology
from resource_contract.policy_config import PolicyConfig


@dataclass(frozen=True)
class Closeness:
    """What the preference makes of one request: `cpus` the CPUs to take from (None: the
    policy's normal placement), `note` why, for the decision's log line, `status` and `plan`."""

    cpus: CPUSet | None
    note: str | None


NOT_ASKED = Closeness(None, None)


def _nodes_text(nodes: tuple[int, ...] | list[int]) -> str:
    return ("NUMA node " if len(nodes) == 1 else "NUMA nodes ") + ",".join(map(str, nodes))


def _unknown(topology: Topology, named: str, nodes: list[int]) -> str | None:
    """The note for devices on nodes this machine does not have; None when it has them all."""
    unknown = [n for n in nodes if n not in topology.nodes]
    if not unknown:
        return None
    return (
        f"devices {named} are on {_nodes_text(unknown)}, which this machine does not have "
        f"(nodes {','.join(map(str, topology.node_ids()))}): normal placement"
    )


def close_cpus(
    topology: Topology,
    config: PolicyConfig,
    request: ContainerRequest,
    free: CPUSet,
    count: int,
) -> Closeness:
    """The CPUs of `free` on the request's device nodes when `count` of them fit there; the
    normal placement (cpus None) with a note saying why not otherwise."""
    if not config.preferCloseToDevices or not request.devices or count <= 0:
        return NOT_ASKED
    named = ", ".join(request.devices)
    if not request.device_nodes:
        return Closeness(None, f"devices {named} report no NUMA node: normal placement")
    nodes = sorted(set(request.device_nodes))
    if unknown := _unknown(topology, named, nodes):
        return Closeness(None, unknown)
    near = CPUSet()
    for node in nodes:
        near = near | topology.cpus_of_node(node)
    there = free & near
    if len(there) < count:
        return Closeness(
            None,
            f"devices {named} are on {_nodes_text(nodes)}, where {len(there)} CPUs are free "
            f"for {count} asked: normal placement",
        )
    return Closeness(there, f"close to devices {named} on {_nodes_text(nodes)}")


def described(topology: Topology, request: ContainerRequest, exclusive: CPUSet) -> str | None:
    """The note of a decision made by an earlier process (restored from the state file, read
    by `status`), from what it left: where the CPUs are against where the devices are."""
    if not request.devices:
        return None
    named = ", ".join(request.devices)
    nodes = sorted(set(request.device_nodes))
    if not nodes:
        return f"devices {named} report no NUMA node: normal placement"
    if unknown := _unknown(topology, named, nodes):
        return unknown
    if exclusive and topology.nodes_of_cpus(exclusive) <= set(nodes):
        return f"close to devices {named} on {_nodes_text(nodes)}"
    return f"devices {named} are on {_nodes_text(nodes)}: normal placement (no room there)"


def device_mems(
    topology: Topology, config: PolicyConfig, request: ContainerRequest, cpus: CPUSet
) -> CPUSet | None:
    """The memory nodes of a container placed close to its devices (those of its CPUs, which
    are all on the devices' nodes); None when the preference did not place it."""
    if not config.preferCloseToDevices or not config.pinMemory or not request.device_nodes:
        return None
    if not cpus or not topology.nodes_of_cpus(cpus) <= set(request.device_nodes):
        return None
    return topology.memory_nodes_of_cpus(cpus)
