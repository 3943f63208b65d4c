"""A pytest killed while the cgroup v2 VM runs in its background leaves no QEMU behind: the
watchdog kills the recorded QEMU once its session is gone, and the next session reaps the folder
of a session that is gone (tests.support.vm_background). QEMU is stood in for by a process whose
command line is a QEMU's (a link named qemu-system-x86_64 to this Python, with -pidfile)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.support.vm_background import reap, watchdog

DEADLINE = 120.0  # s: generous, the machine is shared


def _fake_qemu(run: Path) -> subprocess.Popen[bytes]:
    run.mkdir(parents=True)
    link = run.parent / "bin" / "qemu-system-x86_64"
    link.parent.mkdir(exist_ok=True)
    if not link.exists():
        link.symlink_to(sys.executable)
    pidfile = run / "qemu.pid"
    qemu = subprocess.Popen(
        [str(link), "-c", "import time; time.sleep(600)", "-pidfile", str(pidfile)]
    )
    pidfile.write_text(f"{qemu.pid}\n")
    return qemu


def _gone(proc: subprocess.Popen[bytes]) -> bool:
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return True
        time.sleep(0.2)
    return False


def _dead_pid() -> int:
    done = subprocess.Popen(["true"])
    done.wait()
    return done.pid


def test_the_watchdog_kills_the_qemu_once_its_session_is_gone(tmp_path: Path) -> None:
    qemu = _fake_qemu(tmp_path / "run")
    session = subprocess.Popen(["sleep", "600"])
    dog = watchdog(session.pid, tmp_path / "run")
    try:
        time.sleep(3)  # the watchdog's first check has passed: the session is alive
        assert qemu.poll() is None, "killed while its session was alive"
        session.kill()
        session.wait()
        assert _gone(qemu), "the QEMU outlived its session"
        assert dog.wait(DEADLINE) == 0
    finally:
        for proc in (qemu, session, dog):
            proc.kill()
            proc.wait()


def test_a_session_reaps_only_the_vms_of_sessions_that_are_gone(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    left = _fake_qemu(runs / str(_dead_pid()))
    mine = _fake_qemu(runs / str(os.getpid()))
    try:
        reap(runs)
        assert _gone(left), "a VM of a session that is gone was left running"
        assert [p.name for p in runs.iterdir() if p.name != "bin"] == [str(os.getpid())]
        assert mine.poll() is None, "a live session's VM was killed"
    finally:
        for proc in (left, mine):
            proc.kill()
            proc.wait()
