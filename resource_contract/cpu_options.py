"""kubelet's CPU manager policy options under `policy:`: names, and the combinations refused.

Each key means what kubelet's option of the kebab-case name means (docs/policies.md). Kubelet
refuses some pairs at start-up (`NewStaticPolicyOptions`); the configuration refuses the same
pairs, naming both keys. Checks that need the machine (`alignBySocket` on a machine with more
sockets than NUMA nodes) are the policy's, at construction.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from resource_contract.policy_config import PolicyConfig


class TopologyAdvert(Protocol):
    """What `nodeResourceTopology` tells the scheduler: the fields these checks read."""

    @property
    def enabled(self) -> bool: ...

    @property
    def topologyManagerPolicy(self) -> str | None: ...


# Configuration key -> kubelet's option name.
KUBELET_OPTIONS: dict[str, str] = {
    "fullPCPUsOnly": "full-pcpus-only",
    "distributeCPUsAcrossNUMA": "distribute-cpus-across-numa",
    "distributeCPUsAcrossCores": "distribute-cpus-across-cores",
    "alignBySocket": "align-by-socket",
    "strictCPUReservation": "strict-cpu-reservation",
    "preferAlignCPUsByUncoreCache": "prefer-align-cpus-by-uncorecache",
}

# The pairs kubelet refuses together.
_EXCLUSIVE_PAIRS = (
    ("fullPCPUsOnly", "distributeCPUsAcrossCores"),
    ("distributeCPUsAcrossNUMA", "distributeCPUsAcrossCores"),
    ("preferAlignCPUsByUncoreCache", "distributeCPUsAcrossCores"),
    ("preferAlignCPUsByUncoreCache", "distributeCPUsAcrossNUMA"),
)

_POLICIES = ("static", "topology-aware")


def kubelet_option_problems(policy: PolicyConfig, topology_config: TopologyAdvert) -> list[str]:
    """One `policy.KEY: reason` line per kubelet option set where it cannot be honoured."""
    devices = (
        [
            f"policy.preferCloseToDevices: read by the static and topology-aware policies only, "
            f"not by {policy.name}"
        ]
        if policy.preferCloseToDevices and policy.name not in _POLICIES
        else []
    )
    enabled = [key for key in KUBELET_OPTIONS if getattr(policy, key)]
    if not enabled:
        return devices
    if policy.name not in _POLICIES:
        return [
            f"policy.{key}: kubelet's {KUBELET_OPTIONS[key]} is read by the static and "
            f"topology-aware policies only, not by {policy.name}"
            + (" (a balloon type's CPUs are its own map)" if policy.name == "balloons" else "")
            for key in enabled
        ] + devices
    problems = [
        f"policy.{second}: cannot be used with policy.{first} (kubelet refuses "
        f"{KUBELET_OPTIONS[first]} and {KUBELET_OPTIONS[second]} together)"
        for first, second in _EXCLUSIVE_PAIRS
        if getattr(policy, first) and getattr(policy, second)
    ]
    if policy.alignBySocket and topology_config.enabled:
        advertised = topology_config.topologyManagerPolicy
        if advertised is None and policy.name == "topology-aware":
            advertised = "single-numa-node"
        if advertised == "single-numa-node":
            problems.append(
                "policy.alignBySocket: cannot be used with nodeResourceTopology."
                "topologyManagerPolicy single-numa-node (the default under topology-aware; "
                "kubelet refuses align-by-socket with the single-numa-node topology manager "
                "policy): set it to restricted or best-effort"
            )
    return problems
