"""A hung background VM is told from a slow one, and booted again once for the subset
(tests.support.vm_hang, tests.support.vm_background): a VM that answered ssh or wrote a disk
lately is slow, not hung; one that did neither for the limit is hung; the background run boots
it again and runs the subset once more, and a second hang fails the run with both told."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.support import vm_background
from tests.support.vm import VMHung
from tests.support.vm_background import Background
from tests.support.vm_hang import HANG_SECONDS, hang_reason, hang_seconds, last_write, threads


def test_a_vm_that_answered_or_wrote_lately_is_not_hung() -> None:
    now = 10_000.0
    assert hang_reason(now, last_reply=now - 899, written=0.0, limit=900) is None
    assert hang_reason(now, last_reply=0.0, written=now - 899, limit=900) is None


def test_a_vm_that_neither_answered_nor_wrote_for_the_limit_is_hung() -> None:
    why = hang_reason(10_000.0, last_reply=8_000.0, written=9_000.0, limit=900)
    assert why is not None
    assert "no ssh reply for 2000 s" in why and "for 1000 s" in why


def test_the_last_write_is_the_newest_of_the_disks_and_the_console(tmp_path: Path) -> None:
    assert last_write(tmp_path) == 0.0
    for name, when in (("root.qcow2", 1_000), ("scratch.qcow2", 3_000), ("console.log", 2_000)):
        (tmp_path / name).write_text("")
        os.utime(tmp_path / name, (when, when))
    assert last_write(tmp_path) == 3_000


def test_the_limit_comes_from_the_environment_and_a_bad_one_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KRE_VM_HANG_SECONDS", raising=False)
    assert hang_seconds() == HANG_SECONDS
    monkeypatch.setenv("KRE_VM_HANG_SECONDS", "120")
    assert hang_seconds() == 120
    for bad in ("soon", "0", "-5", "nan"):
        monkeypatch.setenv("KRE_VM_HANG_SECONDS", bad)
        with pytest.raises(ValueError, match="KRE_VM_HANG_SECONDS"):
            hang_seconds()


def test_the_threads_of_a_process_are_named_with_their_state() -> None:
    ready, done = threading.Event(), threading.Event()

    def waiting() -> None:
        ready.set()
        done.wait()

    worker = threading.Thread(target=waiting)
    worker.start()
    ready.wait()
    try:
        seen = threads(os.getpid())
    finally:
        done.set()
        worker.join()
    assert seen.count("state ") >= 2, seen
    assert f"{os.getpid()} " in seen and "CPU s" in seen


class _FakeVM:
    """A VM whose subset hangs ``hangs`` times, then passes; its downs are counted."""

    def __init__(self, record: dict[str, int]) -> None:
        self.record = record

    def run_detached(self, command: str, **_: Any) -> tuple[int, str]:
        self.record["runs"] += 1
        if self.record["runs"] <= self.record["hangs"]:
            raise VMHung(f"hang {self.record['runs']}")
        return 0, "1 passed"

    def down(self, *, poweroff: bool = True) -> None:
        self.record["downs"] += 1


def _background(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hangs: int
) -> tuple[Background, dict[str, int]]:
    record = {"runs": 0, "hangs": hangs, "downs": 0, "ups": 0}

    def up(run: Path, shared: tuple[Path, ...], *, nice: bool) -> _FakeVM:
        record["ups"] += 1
        return _FakeVM(record)

    monkeypatch.setattr(vm_background.VM, "up", staticmethod(up))
    background = Background(run=tmp_path)
    background.outcome.vm = _FakeVM(record)  # type: ignore[assignment]
    (tmp_path / "console.log").write_text("[ 52.3] the last line before the hang\n")
    return background, record


def test_a_hung_vm_is_booted_again_and_the_subset_run_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    background, record = _background(tmp_path, monkeypatch, hangs=1)
    first = background.outcome.vm
    background.booted.set()
    got: list[object] = []  # the VM node's fixture waits from before the hang
    waiter = threading.Thread(target=lambda: got.append(background.wait_finished()))
    waiter.start()
    assert background._run_subset(()) == (0, "1 passed")
    background.finished.set()
    waiter.join()
    assert got == [background.outcome.vm] and got[0] is not first
    assert record == {"runs": 2, "hangs": 1, "downs": 1, "ups": 1}
    assert len(background.outcome.hangs) == 1
    assert "hang 1" in background.outcome.hangs[0]
    assert "the last line before the hang" in background.outcome.hangs[0]
    assert "hung, booted again: hang 1" in background._log()


def test_a_second_hang_fails_the_run_with_both_told(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    background, record = _background(tmp_path, monkeypatch, hangs=2)
    with pytest.raises(VMHung, match="hang 2"):
        background._run_subset(())
    assert record["ups"] == 1
    assert [h.split(";")[0] for h in background.outcome.hangs] == ["hang 1", "hang 2"]
