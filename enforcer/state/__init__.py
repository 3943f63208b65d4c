"""The enforcer's state on disk: crash-safe, owner-only."""

from enforcer.state.store import StateStore

__all__ = ["StateStore"]
