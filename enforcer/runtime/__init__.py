"""The enforcer's own calls to the runtime (re-pinning, reconciling, adopting), over CRI."""

from enforcer.runtime.client import RuntimeClient, live_container, resources_record, unix_target

__all__ = ["RuntimeClient", "live_container", "resources_record", "unix_target"]
