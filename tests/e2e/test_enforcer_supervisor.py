"""`run --supervise`: a relay process that dies is started again, with its state, so kubelet
never stays cut off from the runtime."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from enforcer.state import StateStore
from tests.support.containerd import PrivateContainerd
from tests.support.enforcer_process import EnforcerProcess
from tests.support.kubelet import KubeletEmulator
from tests.support.pods import guaranteed, manifest, sleeper

pytestmark = pytest.mark.containerd


def relay_pid(proc: EnforcerProcess) -> int | None:
    """The relay child's pid, as its state lock records it."""
    try:
        text = Path(proc.state_dir, "enforcer.lock").read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split()[0] != "Z"


def test_a_killed_relay_comes_back_with_its_state(
    containerd: PrivateContainerd, tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text('policy: {name: static, reservedCPUs: "0"}\n')
    proc = EnforcerProcess(
        tmp_path / "supervised",
        runtime_socket=containerd.socket,
        config=str(config),
        extra_args=["--supervise", "--health-file", str(tmp_path / "enforcer.health")],
    )
    health = tmp_path / "enforcer.health"
    proc.start()
    assert proc.proc is not None
    supervisor = proc.proc.pid
    try:
        with KubeletEmulator(proc.relay_socket, log_root=tmp_path / "pods") as kubelet:
            kubelet.run_pod(manifest("kept", sleeper(resources=guaranteed("1"))))
            deadline = time.monotonic() + 15
            while not health.exists() or health.read_text() != "serving\n":
                assert time.monotonic() < deadline, proc.log_tail()
                time.sleep(0.1)
            first = relay_pid(proc)
            assert first is not None and first != supervisor
            os.kill(first, signal.SIGKILL)  # as the OOM killer would
            deadline = time.monotonic() + 20
            while relay_pid(proc) in (None, first) or not alive(relay_pid(proc) or first):
                assert time.monotonic() < deadline, proc.log_tail()
                time.sleep(0.1)
            proc.wait_ready()
            kubelet.version()
            assert alive(supervisor)
            # The state as the next process reads it: the file and its journal's records.
            saved = StateStore(proc.state_dir).load(move_aside=False)
            assert saved is not None
            assert [a["request"]["pod_name"] for a in saved["policy"]["admitted"]] == ["kept"]
            assert "was killed by signal 9" in proc.log_tail(200)
        second = relay_pid(proc)
    finally:
        assert proc.stop() == 0, proc.log_tail()
    assert second is not None and not alive(second)
    assert not health.exists()  # removed when the enforcer stopped
