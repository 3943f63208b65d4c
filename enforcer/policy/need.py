"""What a container is eligible for under the topology-aware policy's rules and its
preferences: preserved, reserved, exclusive, mixed or shared, and how much."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from enforcer.cpuallocator import CPUOptions, cpus_per_core
from enforcer.decode import ContainerRequest
from enforcer.policy import kubelet_options as kopts
from enforcer.policy.pool_math import format_bytes
from enforcer.topology import CPUSet, Topology
from resource_contract.policy_config import PolicyConfig

Kind = Literal["preserved", "reserved", "exclusive", "mixed", "shared"]


@dataclass(frozen=True)
class Need:
    """What a container is eligible for under the rules and preferences."""

    kind: Kind
    exclusive: int = 0  # whole CPUs of its own
    milli: int = 0  # CPU granted on shared CPUs
    isolated: bool = False  # a 1-CPU exclusive container that prefers an isolated CPU
    memory: int = 0  # bytes: the limit, or the request when there is no limit

    @property
    def shares(self) -> bool:
        return self.kind in ("shared", "mixed")

    def describe(self) -> str:
        parts = []
        if self.exclusive:
            parts.append(f"{self.exclusive} exclusive CPU{'s' if self.exclusive > 1 else ''}")
        if self.shares:
            parts.append(f"{self.milli}m shared CPU")
        text = " + ".join(parts)
        return f"{text} and {format_bytes(self.memory)} memory" if self.memory else text


def need_of(
    request: ContainerRequest,
    topology: Topology,
    config: PolicyConfig,
    cpu_options: CPUOptions,
    reserved: CPUSet,
) -> Need:
    """What `request` is eligible for (the rules of `enforcer.policy.topology_aware`)."""
    prefs = request.preferences
    memory = request.memory_limit or request.memory_request
    milli = request.shared_milli
    if prefs.preserve:
        return Need("preserved")
    if wants_reserved(request, config) and reserved:
        if config.strictCPUReservation and request.namespace not in config.reservedNamespaces:
            raise kopts.strict_refusal(request)
        return Need("reserved", milli=milli, memory=memory)
    prefer_shared = prefs.shared
    if prefer_shared is None:
        # The configured default yields to an explicit request for an isolated CPU.
        prefer_shared = config.preferSharedCPUs and not prefs.isolated
    if not request.exclusive_eligible or milli < 1000 or prefer_shared:
        return Need("shared", milli=milli, memory=memory)
    whole, fraction = divmod(milli, 1000)
    if fraction and cpu_options.full_pcpus_only and whole % cpus_per_core(topology):
        return Need("shared", milli=milli, memory=memory)  # kubelet: fractional is shared
    if fraction:
        return Need("mixed", exclusive=whole, milli=fraction, memory=memory)
    isolated = prefs.isolated
    if isolated is None:
        isolated = config.preferIsolatedCPUs
    return Need("exclusive", exclusive=whole, isolated=whole == 1 and isolated, memory=memory)


def wants_reserved(request: ContainerRequest, config: PolicyConfig) -> bool:
    """A pod of `reservedNamespaces`, or `prefer-reserved-cpus` (either way)."""
    reserved = request.preferences.reserved
    if reserved is None:
        return request.namespace in config.reservedNamespaces
    return reserved
