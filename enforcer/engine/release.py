"""Release: containers that are gone (stopped, removed, exited, never created) give their CPUs
back, in the state file first, then the controllers put back what they did for them.

The caller re-pins afterwards (the shared pools grow onto the CPUs released) when `release`
says it released anything. Runs on the engine's worker.
"""

from __future__ import annotations

from enforcer.engine.model import Entry, Phase
from enforcer.engine.registry import StateWriteFailed
from enforcer.engine.shared import Shared, log


def release(s: Shared, entries: list[Entry], why: str) -> bool:
    """Releases `entries`; whether they were (False: none, or the state could not be written,
    and the CPUs stay held, which is safe)."""
    if not entries:
        return False
    released = []
    stopping = [t for t in map(s.target, entries) if t is not None]
    try:
        with s.registry.change():
            for entry in entries:
                decision = s.registry.remove(entry.key)
                if decision is not None:
                    released.append((decision.request, entry.container_id))
    except StateWriteFailed as exc:
        # Rolled back: the CPUs stay held, which is safe. A listing releases those it shows
        # gone; those the runtime never gave an id are left to `resolve`.
        log.error("%s; the release of %d containers waits", exc, len(entries))
        for entry in entries:
            if entry.container_id is None and entry.key in s.registry:
                s.registry.touch(entry.key, phase=Phase.UNKNOWN, unknown_since=s.clock())
        return False
    if s.controllers is not None:
        for target in stopping:
            s.record(s.controllers.stop(target), target.container_id)
    for req, container_id in released:  # said once it is written
        log.info(
            "released %s/%s container %s (%s): %s",
            req.namespace,
            req.pod_name,
            req.container,
            container_id or "not created",
            why,
        )
    s.count()
    return True
