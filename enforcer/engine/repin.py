"""Re-pinning: every live container brought to its current placement through the runtime (the
shared pools move as containers come and go), then the node-wide CPU classes after the policy's
CPUs. Runs on the engine's worker.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from enforcer.engine.kubelet_record import KubeletRecord
from enforcer.engine.model import Entry, LiveContainer, Phase, Pinning
from enforcer.engine.ports import ContainerMissing, RecordUnusable, RuntimeAway
from enforcer.engine.registry import StateWriteFailed
from enforcer.engine.release import release
from enforcer.engine.shared import Shared, log


class Repinner:
    """Applies pinnings through the runtime; `verify` reads a moved container back."""

    def __init__(self, shared: Shared, verify: Callable[[Entry], bool]) -> None:
        self.s = shared
        self.verify = verify

    def repin(self) -> None:
        """Brings every live container to its current placement (shared pools move). A re-pin
        the runtime refuses is logged and retried by `maintain`; `status` shows what is applied."""
        s = self.s
        s.repin_failed = False
        s.vanished = False
        s.repinning = True
        try:
            self._repin_once()
        finally:
            s.repinning = False
        if s.vanished:
            self.repin()  # a container was gone: the pools it left move again
            return
        self._node_classes()

    def _repin_once(self) -> None:
        s = self.s
        moves = []
        for entry in list(s.registry.entries.values()):
            if entry.container_id is None:
                continue
            pinning = s.wanted(entry.key)
            if (pinning.cpus, pinning.mems) != (entry.applied_cpus, entry.applied_mems):
                holds = s.registry.placement(entry.key).exclusive
                moves.append((bool(holds), entry.container_id, entry, pinning))
        # Containers without CPUs of their own move first: by the time a container moves into
        # CPUs of its own (a reconfiguration may swap CPUs between containers), the shared
        # containers that were on them have left.
        moves.sort(key=lambda move: move[0])
        for _, container_id, entry, pinning in moves:
            if self.apply(entry, container_id, pinning):
                log.info(
                    "re-pinned container %s to cpus=%s mems=%s",
                    container_id,
                    pinning.cpus,
                    pinning.mems,
                )
                current = s.registry.get(entry.key)
                target = s.target(current) if current is not None else None
                if s.controllers is not None and target is not None:
                    s.record(s.controllers.repin(target), target.container_id)
                if current is not None and current.phase is Phase.RUNNING:
                    self.verify(current)

    def apply(self, entry: Entry, container_id: str, pinning: Pinning) -> bool:
        """Moves one container to `pinning`; whether the runtime did (a container found gone is
        released, a refusal retried by `maintain`)."""
        s = self.s
        try:
            try:
                sent = s.runtime.repin(container_id, entry.resources, pinning)
            except RecordUnusable as unusable:
                sent = s.runtime.repin(
                    container_id, self._runtime_record(entry, container_id, unusable), pinning
                )
        except ContainerMissing:
            # Within a re-pin, the others are not re-pinned now: `repin` goes round again.
            repinning = s.repinning
            if release(s, [entry], "the runtime no longer has it") and not repinning:
                self.repin()
            s.vanished = True
            return False
        except (RuntimeAway, RuntimeError) as exc:
            s.repin_failed = True
            s.metrics.controller_errors.labels("cpuset").inc()
            log.error(
                "re-pinning container %s to cpus=%s mems=%s failed (will retry): %s",
                container_id,
                pinning.cpus,
                pinning.mems,
                exc,
            )
            return False
        s.registry.set_applied(entry.key, pinning.cpus, pinning.mems)
        s.registry.touch(entry.key, resources=sent)
        return True

    def _runtime_record(
        self, entry: Entry, container_id: str, unusable: RecordUnusable
    ) -> KubeletRecord:
        """The runtime's own record of kubelet's resources for a container whose saved one
        cannot be sent; the saved one's RecordUnusable again when the runtime has none."""
        live = LiveContainer(container_id, entry.sandbox_id, entry.key, running=True, exited=False)
        recorded = self.s.runtime.recorded(live)
        if recorded is None:
            raise unusable
        log.warning(
            "container %s: %s; re-pinning it with the runtime's own record instead",
            container_id,
            unusable,
        )
        return recorded.resources

    def _node_classes(self) -> None:
        """CPU classes follow the policy's CPUs. The values the writes will replace are read
        and saved in the state first, so that a crash at any point leaves the originals to
        the next process; when they cannot be saved nothing is written (retried at the next
        change)."""
        s = self.s
        if s.controllers is None:
            return
        classes = s.policy.cpu_classes()
        s.controllers.exclusive(s.policy.taken)
        if s.controllers.remember(classes) or s.originals_unsaved:
            try:
                s.persist()
            except StateWriteFailed as exc:
                s.originals_unsaved = True
                log.error("%s: CPU classes are not written until the originals are saved", exc)
                return
            s.originals_unsaved = False
        if s.controllers.cpus(classes):
            with contextlib.suppress(StateWriteFailed):  # the store says why; retried by flush
                s.persist()
