"""Reconfiguration: a new configuration applied to everything running, all or nothing: the
registry rebuilt under the new policy and written, then the containers re-pinned and their
classes applied again. Runs on the engine's worker.
"""

from __future__ import annotations

from enforcer.engine.model import Phase
from enforcer.engine.registry import StateWriteFailed
from enforcer.engine.repin import Repinner
from enforcer.engine.shared import Shared, class_settings, log
from enforcer.policy import make_policy
from resource_contract.config import Config


def reconfigure(s: Shared, repinner: Repinner, config: Config) -> list[str]:
    """See `Enforcer.reconfigure`."""
    policy = make_policy(s.topology, config.policy)
    if s.controllers is not None:
        for warning in s.controllers.configure(config):
            log.warning("%s", warning)
    old_policy, old_entries, old_config = s.policy, dict(s.registry.entries), s.config
    try:
        with s.registry.change():
            notes = s.registry.rebuild(policy)
            s.config = config
    except StateWriteFailed:
        s.registry.policy, s.registry.entries, s.config = old_policy, old_entries, old_config
        raise
    for note in notes:
        log.warning("after reconfiguration: %s", note)
    s.classes = class_settings(config)
    repinner.repin()
    if s.controllers is not None:
        # Class definitions may have changed: every running container's classes again.
        for entry in list(s.registry.entries.values()):
            target = s.target(entry)
            if entry.phase is Phase.RUNNING and target is not None:
                s.record(s.controllers.update(target), target.container_id)
    s.count()
    return notes
