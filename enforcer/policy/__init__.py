"""Policies: from a ContainerRequest to a Placement. Pure code, shared by the relay and `plan`."""

from enforcer.policy.balloons import BalloonsPolicy
from enforcer.policy.base import Policy, resolve_cpu_sets
from enforcer.policy.model import Admitted, BalloonView, Placement, PlacementError, PoolView
from enforcer.policy.none import NonePolicy
from enforcer.policy.static import StaticPolicy
from enforcer.policy.topology_aware import TopologyAwarePolicy
from enforcer.topology import Topology
from resource_contract.policy_config import PolicyConfig

POLICIES: dict[str, type[Policy]] = {
    p.name: p for p in (NonePolicy, StaticPolicy, TopologyAwarePolicy, BalloonsPolicy)
}


def make_policy(topology: Topology, config: PolicyConfig) -> Policy:
    """The configured policy; ConfigError when its CPU sets do not fit the machine."""
    try:
        cls = POLICIES[config.name]
    except KeyError:
        raise NotImplementedError(f"policy {config.name!r} is not implemented yet") from None
    return cls(topology, config)


__all__ = [
    "POLICIES",
    "Admitted",
    "BalloonView",
    "BalloonsPolicy",
    "NonePolicy",
    "Placement",
    "PlacementError",
    "Policy",
    "PoolView",
    "StaticPolicy",
    "TopologyAwarePolicy",
    "make_policy",
    "resolve_cpu_sets",
]
