"""The engine's decisions in situations a real runtime cannot be made to produce on demand:
refused re-pins, calls cut off mid-way, a restart racing kubelet's retries, state writes that
fail, cpusets that drift. (Configurations that cannot place a running container:
test_engine_reconfigure.) The runtime and the kernel here are small stand-ins for the
engine's ports (tests/engine/standins.py); the end-to-end tests and the fault suite use the
real containerd and cgroups."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from enforcer.engine import Enforcer, Phase, Pinning, Recorded
from enforcer.engine.kubelet_record import KubeletRecord
from enforcer.engine.ports import RuntimeAway
from enforcer.refusal import Reason, Refusal
from enforcer.topology import CPUSet
from tests.engine.standins import (
    Clock,
    FailingStore,
    StandInRuntime,
    admit,
    create,
    create_of,
    enforcer,
)
from tests.support.pods import guaranteed

Judge = Callable[[], None]


def test_refused_repin_is_shown_and_retried(tmp_path: Path) -> None:
    runtime = StandInRuntime()
    e = enforcer(tmp_path, runtime)
    shared = create(e, runtime, "shared")
    assert runtime.cpus[shared] == "0-3"
    runtime.refuse_updates = RuntimeAway("stand-in runtime is away")
    create(e, runtime, "exclusive", guaranteed("2"))
    assert e.repin_failed
    row = next(v for v in e.views() if v.pod == "shared")
    assert row.cpus == "0-3 (to 0,3)"  # what it has, and where it is going
    runtime.refuse_updates = None
    e.maintain()
    assert runtime.cpus[shared] == "0,3" and not e.repin_failed
    assert next(v for v in e.views() if v.pod == "shared").cpus == "0,3"


def test_restart_does_not_free_a_retried_creation(tmp_path: Path) -> None:
    runtime = StandInRuntime()
    first = enforcer(tmp_path, runtime)
    key, _ = admit(first, "retried", guaranteed("2"))  # then killed
    again = enforcer(tmp_path, runtime, reconciled=False)
    again.restore_saved()
    again.reconcile()  # the runtime has no such container: its creation never completed
    # kubelet retries the creation; the CPUs are decided anew.
    assert admit(again, "retried", guaranteed("2"))[0] == key
    assert key in again.policy.admitted
    runtime.add("cid-late", key)
    again.created(key, "cid-late")
    entry = again.registry.get(key)
    assert entry is not None and entry.container_id == "cid-late"


def test_a_creation_cut_off_by_a_kill_keeps_its_cpus_until_the_runtime_shows_it(
    tmp_path: Path,
) -> None:
    # kill -9 while the runtime makes the container: containerd goes on and makes it, maybe
    # after the new process has read an empty listing. Its CPU must not go to the next pod
    # meanwhile, or two Guaranteed containers run on it once kubelet's retry starts it.
    runtime = StandInRuntime()
    key, first = admit(enforcer(tmp_path, runtime), "in-flight", guaranteed("1"))  # killed
    clock = Clock()
    again = enforcer(tmp_path, runtime, clock=clock, reconciled=False)
    again.restore_saved()
    again.reconcile()  # the runtime does not list it yet
    assert key in again.policy.admitted

    def listed() -> None:  # the next complete listing is judged
        assert again.unknown(runtime.list_containers())
        again.observed(runtime.list_containers(), complete=True, asked_at=again.sequence)

    # containerd finishes the creation: the listing binds it, still on its CPU.
    held_until_shown(again, runtime, clock, key, first, listed)


def held_until_shown(
    e: Enforcer, runtime: StandInRuntime, clock: Clock, key: str, first: Pinning, judge: Judge
) -> None:
    """A creation of unknown outcome: its CPU is refused to the next pod; once the runtime
    shows the container and `judge` looks, it is bound, still on that CPU."""
    with pytest.raises(Refusal) as err:  # the only exclusive CPU left is still held
        admit(e, "next", guaranteed("3"))
    assert err.value.reason is Reason.NO_ROOM
    clock.now += 3
    runtime.add("cid-late", key)
    runtime.cpus["cid-late"] = first.cpus
    judge()
    entry = e.registry.get(key)
    assert entry is not None and entry.container_id == "cid-late"
    assert e.policy.placement(key).exclusive == CPUSet.parse(first.cpus)


def test_a_creation_cut_off_by_a_kill_the_runtime_never_shows_is_released_once_settled(
    tmp_path: Path,
) -> None:
    runtime = StandInRuntime()
    key, _ = admit(enforcer(tmp_path, runtime), "never-made", guaranteed("1"))  # then killed
    clock = Clock()
    again = enforcer(tmp_path, runtime, clock=clock, reconciled=False)
    again.restore_saved()
    again.reconcile()
    clock.now += 9
    again.maintain()
    assert key in again.policy.admitted  # too early to tell: the settle runs from the restart
    clock.now += 2
    again.maintain()
    assert key not in again.policy.admitted
    admit(again, "next", guaranteed("3"))


def test_no_decision_before_the_runtime_was_read(tmp_path: Path) -> None:
    runtime = StandInRuntime()
    e = enforcer(tmp_path, runtime, reconciled=False)
    with pytest.raises(Refusal) as err:
        admit(e, "early", guaranteed("1"))
    assert err.value.reason is Reason.UNAVAILABLE
    assert "not yet read the runtime" in str(err.value)
    e.reconcile()
    admit(e, "early", guaranteed("1"))


def test_cut_off_creation_is_bound_when_the_runtime_shows_it(tmp_path: Path) -> None:
    runtime = StandInRuntime()
    e = enforcer(tmp_path, runtime)
    key, _ = admit(e, "cut", guaranteed("1"))
    runtime.add("cid-cut", key)
    e.create_failed(key, uncertain=True, details="the client went away")
    entry = e.registry.get(key)
    assert entry is not None and entry.container_id == "cid-cut"


def test_cut_off_creation_keeps_its_cpus_until_the_runtime_has_the_last_word(
    tmp_path: Path,
) -> None:
    # The runtime may still be creating the container when kubelet gives up on the call: an
    # empty listing right then proves nothing, and the CPU must not go to the next pod.
    runtime = StandInRuntime()
    clock = Clock()
    e = enforcer(tmp_path, runtime, clock=clock)
    key, first = admit(e, "orphan", guaranteed("1"))
    e.create_failed(key, uncertain=True, details="deadline exceeded")
    entry = e.registry.get(key)
    assert entry is not None and entry.phase is Phase.UNKNOWN
    # The orphan shows up later: the periodic maintenance binds it, still on its CPU.
    held_until_shown(e, runtime, clock, key, first, e.maintain)


def test_cut_off_creation_the_runtime_never_shows_is_released_once_settled(
    tmp_path: Path,
) -> None:
    runtime = StandInRuntime()
    clock = Clock()
    e = enforcer(tmp_path, runtime, clock=clock)
    key, _ = admit(e, "never", guaranteed("1"))
    e.create_failed(key, uncertain=True, details="cancelled")
    e.maintain()
    assert key in e.policy.admitted  # too early to tell
    clock.now += 11
    e.maintain()
    assert key not in e.policy.admitted


def test_cut_off_creation_waits_while_the_runtime_is_away(tmp_path: Path) -> None:
    runtime = StandInRuntime()
    clock = Clock()
    e = enforcer(tmp_path, runtime, clock=clock)
    key, _ = admit(e, "wait", guaranteed("1"))
    runtime.down = True
    e.create_failed(key, uncertain=True, details="connection lost")
    clock.now += 60
    e.maintain()
    assert key in e.policy.admitted  # still held: it may exist
    runtime.down = False
    e.maintain()
    assert key not in e.policy.admitted


def test_a_creation_the_runtime_refused_is_released_at_once(tmp_path: Path) -> None:
    runtime = StandInRuntime()
    e = enforcer(tmp_path, runtime)
    key, _ = admit(e, "refused", guaranteed("1"))
    e.create_failed(key, uncertain=False, details="image not found")
    assert key not in e.policy.admitted


def test_kubelets_empty_filter_listing_releases_vanished_containers(tmp_path: Path) -> None:
    runtime = StandInRuntime()
    e = enforcer(tmp_path, runtime)
    cid = create(e, runtime, "vanishing", guaranteed("1"))
    e.observed([], complete=True, asked_at=e.sequence)
    assert all(t.container_id != cid for t in e.registry.entries.values())
    assert not e.policy.taken


def test_a_listing_adopts_a_live_container_nobody_announced(tmp_path: Path) -> None:
    runtime = StandInRuntime()
    e = enforcer(tmp_path, runtime)
    create_value = create_of("stray", guaranteed("1"))
    key = f"{create_value.pod_uid}/{create_value.container}"
    runtime.add("cid-stray", key)
    runtime.cpus["cid-stray"] = "2"
    runtime.recorded_creates["cid-stray"] = Recorded(create_value, KubeletRecord(), "2", "")
    assert e.unknown(runtime.list_containers())
    e.observed(runtime.list_containers(), complete=True, asked_at=e.sequence)
    assert e.policy.placement(key).exclusive == CPUSet.of(2)


def test_in_place_resize_is_placed_anew(tmp_path: Path) -> None:
    from enforcer.decode import KubeletResources

    runtime = StandInRuntime()
    e = enforcer(tmp_path, runtime)
    cid = create(e, runtime, "grow", guaranteed("1"))
    kubelet = KubeletResources(
        cpu_period=100000, cpu_quota=200000, cpu_shares=2048, memory_limit=64 << 20
    )
    pinning = e.update(cid, kubelet, KubeletRecord())
    assert pinning is not None
    assert len(e.policy.taken) == 2
    assert CPUSet.parse(pinning.cpus) == e.policy.taken


def test_a_cpuset_only_update_is_not_a_resize(tmp_path: Path) -> None:
    """kubelet's CPU manager (static) reconciles with an UpdateContainerResources carrying
    nothing but its cpuset: no shares, quota or memory (0, "unchanged"). That is no resize to
    0 CPUs: the container keeps its exclusive CPU, and the update carries the enforcer's."""
    from enforcer.decode import KubeletResources

    runtime = StandInRuntime()
    e = enforcer(tmp_path, runtime)
    cid = create(e, runtime, "held", guaranteed("1"))
    before = e.policy.taken
    assert len(before) == 1
    pinning = e.update(cid, KubeletResources(cpuset_cpus="0-3"), KubeletRecord())
    assert pinning is not None and CPUSet.parse(pinning.cpus) == before
    assert e.policy.taken == before


def test_a_failed_state_write_rolls_the_admission_back_and_names_the_file(
    tmp_path: Path,
) -> None:
    runtime = StandInRuntime()
    e = enforcer(tmp_path, runtime)
    holder = create(e, runtime, "holder", guaranteed("1"))
    store = e.registry.store
    assert isinstance(store, FailingStore)
    store.fail = OSError(28, "No space left on device")
    with pytest.raises(Refusal) as err:
        admit(e, "unlucky", guaranteed("1"))
    assert err.value.reason is Reason.UNAVAILABLE
    assert str(store.path) in str(err.value) and "No space left on device" in str(err.value)
    # Nothing of the refused admission is left: the CPU it would have had is still free.
    assert len(e.policy.admitted) == 1 and len(e.registry.entries) == 1
    assert len(e.policy.taken) == 1
    store.fail = None
    admit(e, "unlucky", guaranteed("1"))
    assert len(e.policy.taken) == 2
    assert e.registry.by_container(holder) is not None


def test_a_failed_state_write_keeps_a_release_held(tmp_path: Path) -> None:
    runtime = StandInRuntime()
    e = enforcer(tmp_path, runtime)
    cid = create(e, runtime, "going", guaranteed("1"))
    store = e.registry.store
    assert isinstance(store, FailingStore)
    store.fail = PermissionError(30, "Read-only file system")
    e.container_gone(cid, "stopped")
    assert e.registry.by_container(cid) is not None  # safe: its CPU stays held
    store.fail = None
    del runtime.containers[cid]
    e.observed([], complete=True, asked_at=e.sequence)
    assert e.registry.by_container(cid) is None and not e.policy.taken


def test_a_drifted_cpuset_is_repaired(tmp_path: Path) -> None:
    runtime = StandInRuntime()
    e = enforcer(tmp_path, runtime)
    create(e, runtime, "holder", guaranteed("1"))
    shared = create(e, runtime, "sharer")
    wanted = runtime.cpus[shared]
    runtime.cpus[shared] = "0-3"  # written behind the enforcer's back
    e.sweep()
    assert runtime.cpus[shared] == wanted
    assert e.metrics.repairs._value.get() == 1


def test_a_cpuset_that_cannot_be_repaired_is_reported(tmp_path: Path) -> None:
    runtime = StandInRuntime()
    e = enforcer(tmp_path, runtime)
    create(e, runtime, "holder", guaranteed("1"))
    shared = create(e, runtime, "sharer")
    runtime.cpus[shared] = "0-3"
    runtime.ignore_updates = True
    e.sweep()
    row = next(v for v in e.views() if v.pod == "sharer")
    assert row.problem is not None and "cannot repair" in row.problem
    assert e.metrics.unrepaired._value.get() == 1


def test_state_of_another_shape_is_moved_aside_not_fatal(tmp_path: Path) -> None:
    runtime = StandInRuntime()
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / "state.json").write_text(json.dumps({"version": 1, "policy": {"admitted": [{}]}}))
    e = enforcer(tmp_path, runtime)
    e.restore_saved()
    assert not e.policy.admitted


def test_status_never_moves_the_state_file(tmp_path: Path) -> None:
    from enforcer.commands.status import status

    (tmp_path / "state.json").write_text(json.dumps({"version": 3}))
    assert status(str(tmp_path)) == 1
    assert (tmp_path / "state.json").exists()


def test_an_enforcer_not_in_charge_refuses_to_decide(tmp_path: Path) -> None:
    runtime = StandInRuntime()
    e = enforcer(tmp_path, runtime)
    e.not_in_charge = "the enforcer is stopping before it took over the node"
    with pytest.raises(Refusal) as err:
        admit(e, "late", guaranteed("1"))
    assert err.value.reason == Reason.UNAVAILABLE
    assert not e.policy.admitted


def test_a_refused_creation_whose_release_cannot_be_written_is_released_later(
    tmp_path: Path,
) -> None:
    runtime = StandInRuntime()
    clock = Clock()
    e = enforcer(tmp_path, runtime, clock=clock)
    key, _ = admit(e, "refused", guaranteed("1"))
    store = e.registry.store
    assert isinstance(store, FailingStore)
    store.fail = OSError(28, "No space left on device")
    e.create_failed(key, uncertain=False, details="image not found")
    assert key in e.policy.admitted  # the release could not be written: still held
    store.fail = None
    clock.now += 11
    e.maintain()
    assert key not in e.policy.admitted and not e.policy.taken


def test_two_attempts_of_one_container_are_two_containers(tmp_path: Path) -> None:
    # A cut-off attempt 0 may still be made (and run) beside kubelet's attempt 1: releasing
    # one must not drop the other, whose CPUs would then look free.
    from dataclasses import replace

    runtime = StandInRuntime()
    e = enforcer(tmp_path, runtime)
    first = create_of("twice", guaranteed("1"))
    key0, _ = e.create(first, sandbox_id="sandbox", resources=KubeletRecord())
    key1, pinning1 = e.create(
        replace(first, attempt=1), sandbox_id="sandbox", resources=KubeletRecord()
    )
    assert key0 != key1
    runtime.add("cid-1", key1)
    runtime.cpus["cid-1"] = pinning1.cpus
    e.created(key1, "cid-1")
    e.create_failed(key0, uncertain=False, details="name already reserved")
    assert e.registry.by_container("cid-1") is not None
    assert e.policy.placement(key1).exclusive == CPUSet.parse(pinning1.cpus)
