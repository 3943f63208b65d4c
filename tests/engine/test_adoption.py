"""Adoption that settles: a container the runtime cannot remove after kubelet stopped it gets one
state and one log line (no adopt/release flip, no re-pin loop), a metric and a `status` line;
containers adopted onto the shared pool because their CPUs were taken are placed as asked once
the CPUs free up, and reported until then. The runtime and the kernel are the engine port's
stand-in (tests/engine/standins.py); tests/e2e and tests/nri do the same on containerd."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from enforcer.commands.status import status
from enforcer.engine import Enforcer, Recorded
from enforcer.engine.adoption import MAX_STOPPED, STUCK_AFTER_SECONDS, StoppedContainers
from enforcer.engine.kubelet_record import KubeletRecord
from enforcer.topology import CPUSet
from tests.engine.standins import Clock, StandInRuntime, create, create_of, enforcer
from tests.support.pods import guaranteed

STUCK_GAUGE = "resource_enforcer_containers_stuck"
NOT_AS_ASKED_GAUGE = "resource_enforcer_containers_not_placed_as_asked"


def gauge(e: Enforcer, name: str) -> float | None:
    return e.metrics.registry.get_sample_value(name)


def recorded(runtime: StandInRuntime, name: str, resources: dict | None, cpus: str) -> str:
    """A container the runtime has (running on `cpus`) that nobody told the enforcer about."""
    made = create_of(name, resources)
    key = f"{made.pod_uid}/{made.container}"
    cid = f"cid-{name}"
    runtime.add(cid, key)
    runtime.cpus[cid] = cpus
    runtime.recorded_creates[cid] = Recorded(made, KubeletRecord(), cpus, "")
    return cid


def status_rows(e: Enforcer, capsys: pytest.CaptureFixture[str]) -> dict[str, dict]:
    e.flush()
    store = e.registry.store
    assert store is not None
    capsys.readouterr()
    assert status(str(store.dir), "json") == 0
    document = json.loads(capsys.readouterr().out)
    return {row["containerID"]: row for row in document["containers"]}


def lines_about(caplog: pytest.LogCaptureFixture, cid: str, word: str) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if cid in r.getMessage() and word in r.getMessage()
    ]


def test_a_stopped_container_the_runtime_cannot_remove_settles_in_one_state(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.INFO)
    runtime = StandInRuntime()
    clock = Clock()
    e = enforcer(tmp_path, runtime, clock=clock)
    create(e, runtime, "exclusive", guaranteed("1"))
    stuck = create(e, runtime, "stuck")  # a shared container
    create(e, runtime, "neighbour")
    runtime.recorded_creates[stuck] = Recorded(
        create_of("stuck"), KubeletRecord(), runtime.cpus[stuck], ""
    )
    # kubelet stops it; the runtime answers OK, then cannot remove it ("container is in
    # starting state, can't be removed") and goes on listing it as created.
    runtime.add(stuck, e.registry.by_container(stuck).key, running=False)  # type: ignore[union-attr]
    e.container_gone(stuck, "stopped")
    updates_before = len(runtime.updates)

    # kubelet's sweeps: a complete listing every half second, and its stop retried each time.
    sweeps = int(4 * STUCK_AFTER_SECONDS)
    for _ in range(sweeps):
        clock.now += 0.5
        listing = runtime.list_containers()
        if e.unknown(listing) or e.gone(listing, complete=True, asked_at=e.sequence):
            e.observed(listing, complete=True, asked_at=e.sequence)
        e.container_gone(stuck, "stopped")
        e.maintain()

    assert len(lines_about(caplog, stuck, "released")) == 1  # kubelet's first stop
    assert lines_about(caplog, stuck, "adopted") == []
    found = lines_about(caplog, stuck, "still lists it")
    assert len(found) == 1, found
    # At most its own move onto the shared pool: no re-pin loop of it or of the others.
    assert len(runtime.updates) - updates_before <= 1, runtime.updates[updates_before:]
    entry = e.registry.by_container(stuck)
    assert entry is not None and entry.stuck is not None
    assert not e.policy.placement(entry.key).exclusive  # it takes no CPU of its own
    assert gauge(e, STUCK_GAUGE) == 1
    row = status_rows(e, capsys)[stuck]
    assert "still lists it" in row["problem"] and "stopped" in row["problem"]

    # The runtime removes it at last: released once, and nothing left to report.
    del runtime.containers[stuck]
    listing = runtime.list_containers()
    assert e.gone(listing, complete=True, asked_at=e.sequence)
    e.observed(listing, complete=True, asked_at=e.sequence)
    assert e.registry.by_container(stuck) is None
    assert len(lines_about(caplog, stuck, "released")) == 2
    assert gauge(e, STUCK_GAUGE) == 0
    assert stuck not in status_rows(e, capsys)


def test_a_stopped_container_that_is_removed_soon_after_is_never_adopted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """kubelet's ordinary stop then remove: a listing in between shows it still there."""
    caplog.set_level(logging.INFO)
    runtime = StandInRuntime()
    clock = Clock()
    e = enforcer(tmp_path, runtime, clock=clock)
    cid = create(e, runtime, "app")
    runtime.recorded_creates[cid] = Recorded(
        create_of("app"), KubeletRecord(), runtime.cpus[cid], ""
    )
    e.container_gone(cid, "stopped")
    clock.now += 1
    listing = runtime.list_containers()
    assert not e.unknown(listing)
    e.observed(listing, complete=True, asked_at=e.sequence)
    del runtime.containers[cid]
    e.container_gone(cid, "removed", removed=True)
    assert (
        lines_about(caplog, cid, "adopted") == [] and lines_about(caplog, cid, "still lists") == []
    )
    assert not e.registry.entries


def test_a_stuck_container_the_runtime_finally_removes_is_released(tmp_path: Path) -> None:
    runtime = StandInRuntime()
    clock = Clock()
    e = enforcer(tmp_path, runtime, clock=clock)
    cid = create(e, runtime, "app")
    runtime.recorded_creates[cid] = Recorded(
        create_of("app"), KubeletRecord(), runtime.cpus[cid], ""
    )
    e.container_gone(cid, "stopped")
    clock.now += STUCK_AFTER_SECONDS
    e.observed(runtime.list_containers(), complete=True, asked_at=e.sequence)
    assert e.registry.by_container(cid) is not None
    del runtime.containers[cid]
    e.container_gone(cid, "removed", removed=True)  # NRI's RemoveContainer event, say
    assert e.registry.by_container(cid) is None and gauge(e, STUCK_GAUGE) == 0


def test_the_memory_of_stopped_containers_is_bounded() -> None:
    stopped = StoppedContainers(Clock())
    for i in range(MAX_STOPPED + 100):
        stopped.remember(f"cid-{i}", f"key-{i}", "stopped")
    assert len(stopped) == MAX_STOPPED
    assert "cid-0" not in stopped and f"cid-{MAX_STOPPED + 99}" in stopped


def test_guaranteed_containers_adopted_as_shared_are_placed_as_asked_once_cpus_free_up(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.INFO)
    runtime = StandInRuntime()
    first = enforcer(tmp_path, runtime)
    big = create(first, runtime, "big", guaranteed("3"))  # CPUs 1-3: all there is
    first.flush()
    # While the enforcer was away (an NRI plugin down, a relay restarting) two Guaranteed
    # pods started unpinned, on every CPU.
    adopted = [recorded(runtime, name, guaranteed("1"), "0-3") for name in ("late-a", "late-b")]
    e = enforcer(tmp_path, runtime, reconciled=False)
    e.restore_saved()
    e.reconcile()  # what NRI's Synchronize (or the relay's start) does

    keys = {cid: e.registry.by_container(cid).key for cid in adopted}  # type: ignore[union-attr]
    for cid in adopted:
        assert not e.policy.placement(keys[cid]).exclusive  # shared: their CPUs are taken
    assert gauge(e, NOT_AS_ASKED_GAUGE) == 2
    rows = status_rows(e, capsys)
    for cid in adopted:
        assert "until the CPUs it asks for are free" in rows[cid]["problem"]
    for _ in range(3):  # still no room: reported once, not again at each attempt
        e.maintain()
    for cid in adopted:
        assert len(lines_about(caplog, cid, "cannot be placed as asked")) == 1

    # The big pod goes: its CPUs are free, and the next periodic pass places both as asked.
    del runtime.containers[big]
    e.container_gone(big, "removed", removed=True)
    e.maintain()
    held = set()
    for cid in adopted:
        placement = e.policy.placement(keys[cid])
        assert len(placement.exclusive) == 1 and not placement.exclusive & CPUSet.of(0)
        held |= placement.exclusive
        assert runtime.cpus[cid] == str(placement.exclusive)  # moved there (the kernel's view)
        entry = e.registry.by_container(cid)
        assert entry is not None and entry.verified and entry.demoted is None
    assert len(held) == 2
    assert gauge(e, NOT_AS_ASKED_GAUGE) == 0
    rows = status_rows(e, capsys)
    assert all(rows[cid]["problem"] is None for cid in adopted)


def test_a_reconciled_listing_that_shows_a_stopped_container_does_not_adopt_it_at_once(
    tmp_path: Path,
) -> None:
    runtime = StandInRuntime()
    clock = Clock()
    e = enforcer(tmp_path, runtime, clock=clock)
    cid = create(e, runtime, "app")
    runtime.recorded_creates[cid] = Recorded(
        create_of("app"), KubeletRecord(), runtime.cpus[cid], ""
    )
    e.container_gone(cid, "stopped")
    e.reconcile()  # NRI's Synchronize right after the stop
    assert e.registry.by_container(cid) is None
    clock.now += STUCK_AFTER_SECONDS
    e.reconcile()
    entry = e.registry.by_container(cid)
    assert entry is not None and entry.stuck is not None
