"""A container's life after its creation, as kubelet tells it: started (its classes applied and
verified), stopped or removed, alone or with its pod (released, and a stopped one remembered so
that a runtime still listing it does not get it adopted again). Runs on the engine's worker.
"""

from __future__ import annotations

from enforcer.engine.model import Entry, Phase
from enforcer.engine.release import release
from enforcer.engine.repin import Repinner
from enforcer.engine.shared import Shared
from enforcer.engine.verify import Verifier


class Lifecycle:
    def __init__(self, shared: Shared, repinner: Repinner, verifier: Verifier) -> None:
        self.s = shared
        self.repinner = repinner
        self.verifier = verifier

    def started(self, container_id: str) -> None:
        s = self.s
        entry = s.registry.by_container(container_id)
        if entry is None:
            return
        entry = s.registry.touch(entry.key, phase=Phase.RUNNING) or entry
        target = s.target(entry)
        if s.controllers is not None and target is not None:
            s.record(s.controllers.start(target), container_id)
        self.verifier.verify(entry)

    def container_gone(self, container_id: str, why: str, *, removed: bool = False) -> None:
        """See `Enforcer.container_gone`."""
        s = self.s
        if removed:
            s.stopped.forget(container_id)
        entry = s.registry.by_container(container_id)
        if entry is not None:
            self._release(self._stopping([entry], why, removed=removed), why)

    def sandbox_gone(self, sandbox_id: str, why: str, *, removed: bool = False) -> None:
        s = self.s
        entries = s.registry.of_sandbox(sandbox_id)
        if removed:
            for entry in entries:
                if entry.container_id is not None:
                    s.stopped.forget(entry.container_id)
        self._release(self._stopping(entries, why, removed=removed), why)

    def _stopping(self, entries: list[Entry], why: str, *, removed: bool) -> list[Entry]:
        """Of the entries kubelet stopped, those to release now (see `container_gone`)."""
        if removed:
            return entries
        for entry in entries:
            if entry.container_id is not None and entry.stuck is None:
                self.s.stopped.remember(entry.container_id, entry.key, why)
        return [e for e in entries if e.stuck is None]

    def _release(self, entries: list[Entry], why: str) -> None:
        if release(self.s, entries, why):
            self.repinner.repin()
