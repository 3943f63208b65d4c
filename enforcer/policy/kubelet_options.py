"""kubelet's CPU manager options as the static and topology-aware policies apply them.

The allocation itself is the allocator's (`enforcer.cpuallocator.options`); this module turns
the configuration into its options, checks them against the machine as kubelet does at
start-up, and words the refusals kubelet would make (its SMTAlignmentError) as PlacementErrors
naming the option.
"""

from __future__ import annotations

from enforcer.cpuallocator import CPUOptions, SMTAlignmentError, check_request
from enforcer.decode import ContainerRequest
from enforcer.policy.model import PlacementError
from enforcer.refusal import Reason
from enforcer.topology import CPUSet, Topology
from resource_contract.config import ConfigError
from resource_contract.policy_config import PolicyConfig


def cpu_options(config: PolicyConfig) -> CPUOptions:
    return CPUOptions(
        full_pcpus_only=config.fullPCPUsOnly,
        distribute_across_numa=config.distributeCPUsAcrossNUMA,
        distribute_across_cores=config.distributeCPUsAcrossCores,
        align_by_socket=config.alignBySocket,
        prefer_uncore_cache=config.preferAlignCPUsByUncoreCache,
    )


def check_machine(topology: Topology, config: PolicyConfig) -> None:
    """ConfigError where kubelet refuses an option on this machine: align-by-socket where
    there are more sockets than NUMA nodes."""
    sockets, nodes = len(topology.sockets()), len(topology.cpu_nodes())
    if config.alignBySocket and sockets > nodes:
        raise ConfigError(
            [
                f"policy.alignBySocket: this machine has more sockets ({sockets}) than NUMA "
                f"nodes ({nodes}); kubelet refuses align-by-socket there"
            ]
        )


def smt_refusal(request: ContainerRequest, exc: SMTAlignmentError) -> PlacementError:
    """kubelet's SMTAlignmentError as a refusal: a bad request when the count can never be
    whole cores, no room when the whole cores are taken."""
    return PlacementError(
        f"pod {request.namespace}/{request.pod_name} container {request.container}: {exc}",
        Reason.BAD_REQUEST if exc.odd else Reason.NO_ROOM,
    )


def strict_reserved(config: PolicyConfig, reserved: CPUSet, request: ContainerRequest) -> CPUSet:
    """The reserved CPUs `request` may not run on: all of them under strictCPUReservation
    for a pod outside reservedNamespaces (kubelet's strict-cpu-reservation), else none."""
    if config.strictCPUReservation and request.namespace not in config.reservedNamespaces:
        return reserved
    return CPUSet()


def strict_refusal(request: ContainerRequest) -> PlacementError:
    """A pod outside reservedNamespaces asking for the reserved CPUs under
    strictCPUReservation."""
    return PlacementError(
        f"pod {request.namespace}/{request.pod_name} container {request.container}: "
        f"prefer-reserved-cpus asks for the reserved CPUs, which policy.strictCPUReservation "
        f"(kubelet's strict-cpu-reservation) keeps for the reservedNamespaces",
        Reason.FORBIDDEN,
    )


def check_whole(
    topology: Topology, request: ContainerRequest, count: int, options: CPUOptions
) -> None:
    """fullPCPUsOnly: kubelet's SMTAlignmentError for a count that is not whole cores."""
    try:
        check_request(topology, count, options)
    except SMTAlignmentError as exc:
        raise smt_refusal(request, exc) from None


def spread_capacity(topology: Topology, candidates: CPUSet, count: int) -> int:
    """distributeCPUsAcrossCores: how many of `count` CPUs can come from distinct cores."""
    return min(count, sum(1 for core in topology.cores() if core & candidates))


def aligned(topology: Topology, options: CPUOptions, cpus: CPUSet) -> bool:
    """Whether `cpus` lie within the unit an alignment option asks for: one socket
    (alignBySocket) or one L3 group (preferAlignCPUsByUncoreCache)."""
    if options.align_by_socket and len(topology.sockets_of_cpus(cpus)) == 1:
        return True
    if options.prefer_uncore_cache:
        return len({topology.cpus[c].l3 for c in cpus}) == 1
    return False
