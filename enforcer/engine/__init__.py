"""The enforcer's core: from CRI events to applied placements and persisted state."""

from enforcer.engine.enforcer import ContainerView, Enforcer, Refused, views_of
from enforcer.engine.ledger import Ledger, Tracked

__all__ = ["ContainerView", "Enforcer", "Ledger", "Refused", "Tracked", "views_of"]
