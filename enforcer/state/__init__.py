"""The enforcer's state on disk: crash-safe, owner-only."""

from enforcer.state.store import StateError, StateStore

__all__ = ["StateError", "StateStore"]
