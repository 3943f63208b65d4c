"""The enforcer's own calls to the runtime (re-pinning, reconciling), apart from the relay."""

from enforcer.runtime.client import RuntimeClient, RuntimeContainer, unix_target

__all__ = ["RuntimeClient", "RuntimeContainer", "unix_target"]
