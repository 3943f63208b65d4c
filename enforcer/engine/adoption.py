"""Adoption: live containers the registry does not know, taken in from the runtime's record of
their creation, and the containers kubelet stopped that the runtime still lists.

A container is adopted on the CPUs it runs on when they are free, else placed anew, else on the
shared pool (marked: the registry places it as asked once its CPUs are free), else held where
it runs. A container kubelet stopped is not adopted again while the runtime keeps listing it
for a moment (it is on its way out); one the runtime still lists after `STUCK_AFTER_SECONDS`
could not be removed: it is adopted once onto the shared pool and marked stuck, and kubelet's
further stops leave it there until the runtime shows it exited or gone, or removes it. So a
container has one state per listing, whatever the runtime reports, and no re-pin loop follows.
These run on the engine's worker, called by its reconciliation (enforcer.engine.reconcile).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from enforcer.decode import ContainerRequest, decode_container
from enforcer.engine.model import Entry, LiveContainer, Phase
from enforcer.engine.ports import RuntimeAway
from enforcer.engine.registry import demoted
from enforcer.engine.shared import Shared, log
from enforcer.engine.stopped import MAX_STOPPED, STUCK_AFTER_SECONDS, Stopped, StoppedContainers
from enforcer.policy import PlacementError
from enforcer.refusal import Refusal
from enforcer.topology import CPUSet


def newly_stuck(e: Shared, containers: Iterable[LiveContainer]) -> list[LiveContainer]:
    """Live containers of a listing that kubelet stopped a while ago and nobody tracks."""
    return [
        c
        for c in containers
        if c.key
        and not c.exited
        and c.id in e.stopped
        and c.key not in e.registry
        and e.stopped.stuck(c.id) is not None
    ]


def adopt(e: Shared, container: LiveContainer) -> None:
    """Admits a live container the registry does not know, from its recorded creation (see
    the module's docstring). A running container is never left untracked for want of room."""
    stopped = e.stopped.stuck(container.id)
    try:
        recorded = e.runtime.recorded(container)
    except RuntimeAway as exc:
        log.warning("cannot read container %s's configuration: %s", container.id, exc)
        return
    if recorded is None:
        log.warning("container %s has no recorded configuration; not tracked", container.id)
        e.mark_unadoptable(container.id)
        return
    try:
        wanted = e.decode(recorded.create)
    except Refusal as exc:  # DecodeError, or a class request this node cannot apply
        # It runs all the same: tracked on kubelet's numbers alone, without what was refused
        # (its annotations, a cpuset this machine does not have).
        log.warning(
            "running container %s: %s; adopted on kubelet's values alone", container.id, exc
        )
        bare = replace(
            recorded.create,
            annotations={},
            resources=replace(recorded.create.resources, cpuset_cpus="", cpuset_mems=""),
        )
        wanted = decode_container(bare, machine=e.machine, warn=log.warning)
    running_on = _cpuset(recorded.running_cpus)
    stuck = None
    if stopped is not None:
        state = "running" if container.running else "not running"
        stuck = (
            f"kubelet {stopped.why} it, but the runtime still lists it ({state}) and has not "
            "removed it: kept on the shared pool until it does"
        )
    with e.registry.change():
        e.registry.put(
            Entry(
                key=wanted.key,
                sandbox_id=container.sandbox_id,
                phase=Phase.RUNNING if container.running else Phase.CREATED,
                container_id=container.id,
                cgroup_parent=recorded.create.cgroup_parent,
                resources=recorded.resources,
                applied_cpus=str(running_on) if running_on else e.all_cpus,
                applied_mems=recorded.running_mems or e.all_mems,
                stuck=stuck,
            )
        )
        if stuck is not None:
            kind = _place_stuck(e, wanted, running_on)
        else:
            kind = _place(e, wanted, running_on, container.id)
    if stuck is not None:
        req = wanted
        log.warning(
            "pod %s/%s container %s (%s): %s (%s)",
            req.namespace,
            req.pod_name,
            req.container,
            container.id,
            stuck,
            kind,
        )
        return
    log.info("adopted running container %s as %s: %s", container.id, wanted.key, kind)


def _place(e: Shared, wanted: ContainerRequest, running_on: CPUSet, container_id: str) -> str:
    try:
        return e.registry.admit(wanted, keep=running_on or None).kind
    except PlacementError as exc:
        why = f"adopted while the CPUs it asks for were taken ({exc})"
    shared = replace(wanted, preferences=replace(wanted.preferences, shared=True))
    try:
        kind = e.registry.admit(shared).kind
    except PlacementError:
        pass
    else:
        entry = e.registry.entries[wanted.key]
        e.registry.update(wanted.key, **_demotion(demoted(entry, why, wanted)))
        log.warning("running container %s cannot be placed as asked yet: %s", container_id, why)
        return kind
    free = running_on - e.policy.taken
    e.registry.hold(wanted, free, "adopted, but the configuration cannot place it")
    return "held"


def _place_stuck(e: Shared, wanted: ContainerRequest, running_on: CPUSet) -> str:
    """A stuck container takes no CPUs of its own: the shared pool, else held on what it runs
    on that nobody holds."""
    shared = replace(wanted, preferences=replace(wanted.preferences, shared=True))
    try:
        return e.registry.admit(shared).kind
    except PlacementError:
        pass
    e.registry.hold(wanted, running_on - e.policy.taken, "stuck, and the pool cannot take it")
    return "held"


def _demotion(entry: Entry) -> dict[str, object]:
    return {"demoted": entry.demoted, "asked_shared": entry.asked_shared}


def _cpuset(text: str) -> CPUSet:
    try:
        return CPUSet.parse(text)
    except ValueError:
        return CPUSet()


__all__ = [
    "MAX_STOPPED",
    "STUCK_AFTER_SECONDS",
    "Stopped",
    "StoppedContainers",
    "adopt",
    "newly_stuck",
]
