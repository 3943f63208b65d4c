"""A state that cannot be read, or a folder that takes no writes: the enforcer refuses to
decide (UNAVAILABLE, naming the file) until it can, instead of deciding blind."""

from __future__ import annotations

import errno
import logging
from pathlib import Path

import pytest

from enforcer.engine import StateWriteFailed
from enforcer.refusal import Reason, Refusal
from enforcer.state import store as store_module
from tests.engine.restore_support import Runtime, admit, make
from tests.support.pods import guaranteed


def test_the_enforcer_refuses_to_decide_blind_when_the_state_cannot_be_read(
    saved: tuple[Path, Runtime], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder, runtime = saved
    path = folder / "state.json"
    kept = path.read_bytes()
    real = store_module.read_file

    def denied(at: Path) -> bytes:  # root reads anything: the refusal is played
        if Path(at) == path:
            raise PermissionError(errno.EACCES, "Permission denied", str(at))
        return real(at)

    monkeypatch.setattr(store_module, "read_file", denied)
    e = make(folder, runtime)
    e.restore_saved()
    e.reconciled = True  # even so
    with pytest.raises(Refusal) as err:
        admit(e, "blind", guaranteed("1"))
    assert err.value.reason == Reason.UNAVAILABLE
    assert str(err.value).startswith(f"the state file {path} cannot be read: Permission denied")
    with pytest.raises(StateWriteFailed):
        e.persist()  # never written over
    monkeypatch.undo()
    assert path.read_bytes() == kept
    e.restore_saved()  # readable again
    assert e.registry.store is not None and e.registry.store.problem is None
    assert len(e.policy.admitted) == 3


def test_a_folder_that_takes_no_writes_refuses_decisions_until_a_write_works(
    saved: tuple[Path, Runtime], caplog: pytest.LogCaptureFixture
) -> None:
    folder, runtime = saved
    e = make(folder, runtime)
    e.restore_saved()
    e.reconcile()
    (folder / ".state.json.tmp").mkdir()  # where every write goes first: now a folder
    with pytest.raises(Refusal) as err:
        admit(e, "fourth")
    assert err.value.reason == Reason.UNAVAILABLE
    assert str(err.value) == (
        f"cannot write the state file {folder / 'state.json'}: Is a directory (EISDIR)"
    )
    assert len(e.policy.admitted) == 3  # rolled back
    # Until a write works, nothing is decided, and the reason names the folder and the error.
    with pytest.raises(Refusal) as err:
        admit(e, "fifth")
    assert str(err.value) == (
        f"the state folder {folder} cannot be written: Is a directory (EISDIR)"
    )
    caplog.clear()
    with caplog.at_level(logging.ERROR):
        e.maintain()  # the retry fails quietly: the problem was logged once already
    assert not caplog.records
    (folder / ".state.json.tmp").rmdir()
    e.maintain()
    assert e.registry.store is not None and e.registry.store.problem is None
    admit(e, "fifth")
    assert len(e.policy.admitted) == 4
