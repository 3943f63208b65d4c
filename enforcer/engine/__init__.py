"""The enforcer's engine: runtime events to decisions over the container registry, applied,
verified and persisted, in domain values only."""

from enforcer.engine.enforcer import Enforcer
from enforcer.engine.kubelet_record import KubeletRecord
from enforcer.engine.model import Entry, LiveContainer, Phase, Pinning, Recorded
from enforcer.engine.registry import ContainerView, Registry, StateWriteFailed, views_of

__all__ = [
    "ContainerView",
    "Enforcer",
    "Entry",
    "KubeletRecord",
    "LiveContainer",
    "Phase",
    "Pinning",
    "Recorded",
    "Registry",
    "StateWriteFailed",
    "views_of",
]
