"""Reconciliation: the registry brought in line with what the runtime lists, at the start (after
a restart, a crash or a lost state) and from every listing after: gone containers released,
unknown creations resolved, live containers nobody told us about adopted
(enforcer.engine.adoption).

`gone` and `unknown` only read, so that a transport may call them on its event loop to skip
needless work; the rest runs on the engine's worker.
"""

from __future__ import annotations

from collections.abc import Iterable

from enforcer.engine.admission import UNKNOWN_SETTLE_SECONDS, Admission
from enforcer.engine.adoption import adopt, newly_stuck
from enforcer.engine.model import Entry, LiveContainer, Phase
from enforcer.engine.release import release
from enforcer.engine.repin import Repinner
from enforcer.engine.shared import Shared, log
from enforcer.engine.verify import Verifier


class Reconciler:
    def __init__(
        self, shared: Shared, repinner: Repinner, verifier: Verifier, admission: Admission
    ) -> None:
        self.s = shared
        self.repinner = repinner
        self.verifier = verifier
        self.admission = admission

    def gone(
        self, containers: Iterable[LiveContainer], *, complete: bool, asked_at: int
    ) -> list[Entry]:
        """See `Enforcer.gone` (reads only)."""
        states = {c.id: c for c in containers}
        found = []
        for entry in list(self.s.registry.entries.values()):
            if entry.container_id is None:
                continue
            listed = states.get(entry.container_id)
            vanished = complete and listed is None and entry.bound_at <= asked_at
            if (listed is not None and listed.exited) or vanished:
                found.append(entry)
        return found

    def _strangers(self, containers: Iterable[LiveContainer]) -> list[LiveContainer]:
        """Live kubelet containers of a listing whose pod and name the registry does not know
        (one being created, or of unknown outcome, is known: `created` or `resolve` binds it)
        and that were not found unadoptable before."""
        s = self.s
        return [
            c
            for c in containers
            if c.key
            and not c.exited
            and c.key not in s.registry
            and c.id not in s.unadoptable
            and c.id not in s.stopped
        ]

    def unknown(self, containers: Iterable[LiveContainer]) -> bool:
        """See `Enforcer.unknown` (reads only)."""
        containers = list(containers)
        unresolved = any(e.phase is Phase.UNKNOWN for e in list(self.s.registry.entries.values()))
        return bool(unresolved or self._strangers(containers) or newly_stuck(self.s, containers))

    def observed(
        self, containers: Iterable[LiveContainer], *, complete: bool, asked_at: int
    ) -> None:
        """See `Enforcer.observed`."""
        s = self.s
        containers = list(containers)
        gone = self.gone(containers, complete=complete, asked_at=asked_at)
        if release(s, gone, "it exited or vanished"):
            self.repinner.repin()
        if not complete:
            return
        self.admission.resolve(containers)
        strangers = self._strangers(containers) + newly_stuck(s, containers)
        s.stopped.listed(containers)
        for container in strangers:
            adopt(s, container)
        if strangers:
            self.repinner.repin()

    def reconcile(self) -> None:
        """See `Enforcer.reconcile`."""
        s = self.s
        live = {c.id: c for c in s.runtime.list_containers() if not c.exited}
        by_key = {c.key: c for c in live.values() if c.key}
        cut_off = 0
        with s.registry.change():
            for key, entry in list(s.registry.entries.items()):
                if entry.container_id is None:
                    if entry.phase is not Phase.UNKNOWN:
                        continue  # this process is creating it right now
                    found = by_key.get(key)
                    if found is None:
                        # Cut off by the last stop: the runtime may still be making it (a
                        # kill -9 mid-create). Held until the runtime has the last word, as a
                        # creation cut off in this process is (`resolve`).
                        cut_off += 1
                        continue
                    s.registry.bind(key, found.id)
                    entry = s.registry.entries[key]
                if entry.container_id not in live:
                    s.registry.remove(key)
                    continue
                running = live[entry.container_id].running
                s.registry.update(key, phase=Phase.RUNNING if running else Phase.CREATED)
            known = {e.container_id for e in s.registry.entries.values()}
            for container in live.values():
                if container.id in known:
                    continue
                if container.id not in s.stopped or s.stopped.stuck(container.id):
                    adopt(s, container)
        if cut_off:
            log.warning(
                "%d creations cut off by the last stop are not in the runtime yet: their CPUs "
                "stay held until it shows them or %.0fs pass",
                cut_off,
                UNKNOWN_SETTLE_SECONDS,
            )
        s.reconciled = True
        self.repinner.repin()
        self.verifier.sweep()
        s.count()
        log.info("reconciled with the runtime: %d containers tracked", len(s.registry.entries))
