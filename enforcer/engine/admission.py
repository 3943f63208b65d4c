"""Admission: a container about to be created is decoded, placed and written down before the
runtime creates it; then bound to the id the runtime gave it, or released when the creation
failed, or held while its outcome is unknown until the runtime says. Runs on the engine's worker.
"""

from __future__ import annotations

from collections.abc import Iterable

from enforcer.decode import ContainerCreate
from enforcer.engine import claimed
from enforcer.engine.kubelet_record import KubeletRecord
from enforcer.engine.model import Entry, LiveContainer, Phase, Pinning
from enforcer.engine.ports import RuntimeAway
from enforcer.engine.registry import StateWriteFailed
from enforcer.engine.release import release
from enforcer.engine.repin import Repinner
from enforcer.engine.shared import Shared, log
from enforcer.refusal import Refusal

# A creation whose outcome is unknown is given up only when listings taken this long after it
# still do not show the container (the runtime finishes or abandons a creation well within
# it); kubelet's retry, the pod's removal or the container showing up end it sooner.
UNKNOWN_SETTLE_SECONDS = 10.0


class Admission:
    def __init__(self, shared: Shared, repinner: Repinner) -> None:
        self.s = shared
        self.repinner = repinner

    def create(
        self,
        create: ContainerCreate,
        *,
        sandbox_id: str,
        resources: KubeletRecord,
        sync_later: bool = False,
    ) -> tuple[str, Pinning]:
        """See `Enforcer.create`."""
        s = self.s
        s.may_decide()
        try:
            wanted = s.decode(create)
            with s.registry.change(sync_later=sync_later):
                placement = s.registry.admit(wanted)
                pinning = Pinning(
                    str(placement.cpus) if placement.cpus else "",
                    str(placement.mems) if placement.mems else "",
                )
                if pinned := claimed.pinning_of(s.policy, s.topology, wanted):
                    pinning = Pinning(str(pinned[0]), str(pinned[1]))
                s.registry.put(
                    Entry(
                        key=wanted.key,
                        sandbox_id=sandbox_id,
                        cgroup_parent=create.cgroup_parent,
                        resources=resources,
                        applied_cpus=pinning.cpus or create.resources.cpuset_cpus or s.all_cpus,
                        applied_mems=pinning.mems or create.resources.cpuset_mems or s.all_mems,
                    )
                )
        except Refusal as exc:  # DecodeError, PlacementError, StateWriteFailed, a class refused
            s.metrics.refusals.labels(exc.reason.value).inc()
            raise Refusal(exc.reason, str(exc)) from None
        s.metrics.decisions.labels(s.policy.name, placement.kind).inc()
        if sync_later:
            s.count_pending = True  # by `sync_state`, off the call's path
        else:
            s.count()
        log.info(
            "admitted %s/%s container %s: %s cpus=%s mems=%s (from %s)",
            wanted.namespace,
            wanted.pod_name,
            wanted.container,
            placement.kind,
            placement.cpus,
            placement.mems,
            wanted.source,
        )
        if note := s.policy.device_note(wanted.key):
            log.info(
                "%s/%s container %s: %s", wanted.namespace, wanted.pod_name, wanted.container, note
            )
        if ignored := s.policy.cpu_class_ignored(wanted.key):
            log.warning(
                "%s/%s container %s: %s",
                wanted.namespace,
                wanted.pod_name,
                wanted.container,
                ignored,
            )
        return wanted.key, pinning

    def sync_state(self) -> str | None:
        """See `Enforcer.sync_state`."""
        s = self.s
        try:
            s.registry.sync()
        except StateWriteFailed as exc:
            log.error("%s; the containers decided meanwhile keep their CPUs", exc)
            return str(exc)
        finally:
            if s.count_pending:
                s.count_pending = False
                s.count()
        return None

    def created(self, key: str, container_id: str) -> None:
        entry = self.s.registry.get(key)
        if entry is None or entry.container_id is not None:
            return
        self.s.registry.bind(key, container_id)
        self.repinner.repin()

    def create_failed(self, key: str, *, uncertain: bool, details: str) -> None:
        """See `Enforcer.create_failed`."""
        s = self.s
        entry = s.registry.get(key)
        if entry is None or entry.container_id is not None:
            return
        if not uncertain:
            if release(s, [entry], f"the runtime refused to create it: {details}"):
                self.repinner.repin()
            return
        # The runtime has the last word: the hold stays until it says.
        s.registry.touch(key, phase=Phase.UNKNOWN, unknown_since=s.clock())
        log.warning(
            "creation of %s was cut off (%s); holding its CPUs until the runtime says", key, details
        )
        self.resolve()

    def resolve(self, live: Iterable[LiveContainer] | None = None) -> None:
        """See `Enforcer.resolve`."""
        s = self.s
        unknown = [e for e in s.registry.entries.values() if e.phase is Phase.UNKNOWN]
        if not unknown:
            return
        if live is None:
            try:
                live = s.runtime.list_containers()
            except RuntimeAway as exc:
                log.warning("cannot ask the runtime about %d creations yet: %s", len(unknown), exc)
                return
        by_key = {c.key: c for c in live if c.key and not c.exited}
        now = s.clock()
        for entry in unknown:
            found = by_key.get(entry.key)
            if found is not None:
                s.registry.bind(entry.key, found.id)
                if found.running:
                    s.registry.touch(entry.key, phase=Phase.RUNNING)
                log.info("the runtime has %s as container %s", entry.key, found.id)
            elif now - entry.unknown_since >= UNKNOWN_SETTLE_SECONDS and release(
                s, [entry], "its creation did not complete"
            ):
                self.repinner.repin()
        self.repinner.repin()
