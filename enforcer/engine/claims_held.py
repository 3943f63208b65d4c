"""Prepared DRA claims held and released by the engine for the DRA driver (the claims' own
rules: enforcer.engine.claimed). Runs on the engine's worker."""

from __future__ import annotations

from enforcer.decode import ContainerRequest
from enforcer.engine import claimed
from enforcer.engine.repin import Repinner
from enforcer.engine.shared import Shared
from enforcer.refusal import Reason, Refusal
from enforcer.topology import CPUSet


def hold_claim(s: Shared, repinner: Repinner, request: ContainerRequest, cpus: CPUSet) -> None:
    """See `Enforcer.hold_claim`."""
    s.may_decide()
    with s.registry.change():
        s.registry.hold_claim(request, cpus)
    s.count()
    repinner.repin()


def release_claim(s: Shared, repinner: Repinner, uid: str) -> bool:
    """See `Enforcer.release_claim`."""
    if s.not_in_charge:
        raise Refusal(Reason.UNAVAILABLE, s.not_in_charge)
    key = claimed.claim_key(uid)
    if key not in s.policy.admitted:
        return False
    with s.registry.change():
        s.registry.remove(key)
    s.count()
    repinner.repin()
    return True
