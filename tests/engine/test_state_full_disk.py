"""A state folder on a real file system that fills up and frees again (a small tmpfs of its
own): while it is full, new containers are refused UNAVAILABLE with a message naming the
folder; the first creation after it has room again is placed, without waiting for the
periodic write to find out."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from enforcer.controllers.cpuset import CpusetController
from enforcer.controllers.group import Controllers
from enforcer.engine import Enforcer
from enforcer.refusal import Reason, Refusal
from enforcer.state import StateStore
from tests.engine.standins import CONFIG, MACHINE, Clock, StandInRuntime, admit, create
from tests.faults.state_dir import TmpfsStateDir
from tests.support.pods import guaranteed


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[TmpfsStateDir]:
    made = TmpfsStateDir(tmp_path / "state", size="1m")
    made.mount()
    try:
        yield made
    finally:
        made.unmount()


def test_the_first_creation_after_a_full_disk_frees_is_placed(tmpfs: TmpfsStateDir) -> None:
    runtime = StandInRuntime()
    store = StateStore(tmpfs.path)
    store.ensure_dir()
    e = Enforcer(
        topology=MACHINE,
        config=CONFIG,
        store=store,
        runtime=runtime,
        controllers=Controllers([CpusetController(runtime)]),
        clock=Clock(),
    )
    e.restore_saved()
    e.reconcile()
    create(e, runtime, "before", guaranteed("1"))

    tmpfs.fill()
    for name in ("during", "still-during"):  # each creation asks the disk again: still full
        with pytest.raises(Refusal) as refused:
            admit(e, name, guaranteed("1"))
        assert refused.value.reason is Reason.UNAVAILABLE
        assert str(tmpfs.path) in str(refused.value)
    assert store.problem is not None and "No space left" in store.problem

    tmpfs.empty()
    # No periodic write in between (`maintain`, `flush`): the creation itself finds the room.
    key, pinning = admit(e, "after", guaranteed("1"))
    assert pinning.cpus == str(e.policy.placement(key).exclusive) != ""
    assert store.problem is None
    saved = StateStore(tmpfs.path).load(move_aside=False)
    assert saved is not None and key in {c["key"] for c in saved["containers"]}
    assert len(e.policy.taken) == 2  # "before" and "after", each on its own CPU
