"""The cluster bed's stand-in for systemd, without a cluster: kubelet is started again after it
exits (a kubelet that died dialling a relay path in the instant between an enforcer's stop and
its fallback link left the node NotReady for the rest of a run), each exit is a line in its log,
and a stop ends both the command and the supervisor, leaving nothing behind."""

from __future__ import annotations

from pathlib import Path

from tests.support.cluster import node, procs
from tests.support.cluster.bed import SUPERVISE_SCRIPT
from tests.support.cluster.layout import Layout

EXITS = " supervise: exited with status "


def supervise(lay: Layout, delay: str, started: Path, *command: str) -> None:
    procs.start(lay, "kubelet", [str(SUPERVISE_SCRIPT), delay, str(started), *command])


def exits(lay: Layout) -> list[str]:
    return [line for line in lay.log("kubelet").read_text().splitlines() if EXITS in line]


def test_a_command_that_exits_is_started_again_and_each_exit_is_logged(tmp_path: Path) -> None:
    lay = Layout(tmp_path)
    runs = tmp_path / "runs"
    started = lay.run / "kubelet.last-start"
    # Each run leaves a line, then exits as kubelet did ("validate service connection").
    supervise(lay, "0.2", started, "sh", "-c", f"echo run >> {runs}; exit 3")
    try:
        procs.wait_until(
            "three runs", lambda: runs.exists() and len(runs.read_text().split()) >= 3, 60
        )
    finally:
        procs.stop(lay, "kubelet")
    assert started.exists()
    lines = exits(lay)
    assert len(lines) >= 2
    assert lines[0].endswith("exited with status 3; restart 1 in 0.2 s"), lines
    assert lines[1].endswith("exited with status 3; restart 2 in 0.2 s"), lines
    assert procs.pid_of(lay, "kubelet") is None
    assert node.processes_naming(tmp_path) == []


def test_a_stop_ends_the_command_and_the_supervisor_without_a_restart(tmp_path: Path) -> None:
    lay = Layout(tmp_path)
    started = lay.run / "kubelet.last-start"
    supervise(lay, "0.2", started, "sleep", "1000")
    supervisor = procs.pid_of(lay, "kubelet")
    assert supervisor is not None
    procs.wait_until("the command running", lambda: node.descendants({supervisor}), 60)
    command = node.descendants({supervisor})
    procs.stop(lay, "kubelet")
    assert procs.pid_of(lay, "kubelet") is None
    assert [pid for pid in command if Path(f"/proc/{pid}").exists()] == []
    assert node.processes_naming(tmp_path) == []
    assert exits(lay) == []  # stopped, not exited: nothing restarted it
