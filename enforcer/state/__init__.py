"""The enforcer's state on disk: crash-safe, owner-only."""

from enforcer.state.saved import CheckedState, check_saved
from enforcer.state.store import StateError, StateStore, StateWriteError

__all__ = ["CheckedState", "StateError", "StateStore", "StateWriteError", "check_saved"]
