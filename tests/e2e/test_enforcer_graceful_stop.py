"""A graceful stop of the enforcer (SIGTERM) while kubelet's StopContainer is in flight: the
call's answer reaches kubelet when it finishes within --grace-period; one that outlives it is
cut, and the enforcer still exits 0 with its state saved. Real containerd and runc; the truth
is read from the runtime and the cgroups."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from enforcer.cri import api_pb2
from enforcer.topology import CPUSet
from tests.support.cgroupfs import node_cpus
from tests.support.checks import cpus_of
from tests.support.containerd import PrivateContainerd
from tests.support.enforcer_process import EnforcerProcess
from tests.support.images import BUSYBOX_IMAGE
from tests.support.kubelet import KubeletEmulator, RunningPod
from tests.support.pods import guaranteed, manifest

pytestmark = pytest.mark.containerd

ALL = node_cpus()
RESERVED = CPUSet.of(min(ALL))
# Longer than the 10 s the enforcer used to give calls in flight, shorter than its grace here.
STOP_TIMEOUT = 12


def stubborn() -> dict:
    """A container whose main process survives SIGTERM and says so on its stdout."""
    return {
        "name": "app",
        "image": BUSYBOX_IMAGE,
        "command": ["sh", "-c", 'trap "echo got TERM" TERM; while true; do sleep 1; done'],
        "resources": guaranteed("1"),
    }


@pytest.fixture
def direct(containerd: PrivateContainerd, tmp_path: Path) -> Iterator[KubeletEmulator]:
    """kubelet talking to containerd itself: the truth, and the clean-up once the relay is gone."""
    with KubeletEmulator(containerd.socket, log_root=tmp_path / "direct-pods") as emu:
        yield emu


def start_enforcer(containerd: PrivateContainerd, tmp_path: Path, grace: str) -> EnforcerProcess:
    config = tmp_path / "config.yaml"
    config.write_text(f'policy: {{name: static, reservedCPUs: "{RESERVED}"}}\n')
    proc = EnforcerProcess(
        tmp_path / "enforcer",
        runtime_socket=containerd.socket,
        config=str(config),
        extra_args=["--grace-period", grace],
    )
    return proc.start()


def stop_in_flight(kubelet: KubeletEmulator, pod: RunningPod, timeout: int) -> grpc.Future:
    """Sends StopContainer and returns once the runtime has signalled the container."""
    log = Path(pod.sandbox_config.log_directory, "app", "0.log")
    call = kubelet.runtime.StopContainer.future(
        api_pb2.StopContainerRequest(container_id=pod.container_id("app"), timeout=timeout),
        timeout=timeout + 30,
    )
    deadline = time.monotonic() + 20
    while "got TERM" not in (log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline, "the container never got SIGTERM"
        assert not call.done(), f"StopContainer ended early: {call.exception()}"
        time.sleep(0.05)
    return call


def saved_holders(proc: EnforcerProcess) -> dict[str, str]:
    """Container id -> its exclusive CPUs, as the saved state file says."""
    saved = json.loads(Path(proc.state_dir, "state.json").read_text())
    exclusive = {
        f"{a['request']['pod_uid']}/{a['request']['container']}": a["exclusive"]
        for a in saved["policy"]["admitted"]
    }
    return {c["container_id"]: exclusive[c["key"]] for c in saved["containers"]}


def test_a_stop_in_flight_is_answered_within_the_grace_period(
    containerd: PrivateContainerd, direct: KubeletEmulator, tmp_path: Path
) -> None:
    proc = start_enforcer(containerd, tmp_path, grace=str(STOP_TIMEOUT + 8))
    kubelet = KubeletEmulator(proc.relay_socket, log_root=tmp_path / "pods")
    pod = kubelet.run_pod(manifest("stubborn", stubborn()))
    try:
        call = stop_in_flight(kubelet, pod, STOP_TIMEOUT)
        assert proc.proc is not None
        proc.proc.terminate()  # SIGTERM, the stop still under way
        call.result()  # kubelet gets the runtime's answer: no error
        assert proc.stop() == 0, proc.log_tail()
        # The runtime did stop it, and the saved state no longer holds its CPU.
        assert direct.container_status(pod.container_id("app")).state == api_pb2.CONTAINER_EXITED
        assert pod.container_id("app") not in saved_holders(proc)
        assert "stopped; state saved" in proc.log_tail()
    finally:
        proc.stop()
        kubelet.close(remove_pods=False)
        direct.remove_pod(pod)


def test_a_call_that_outlives_the_grace_period_is_cut_and_the_state_saved(
    containerd: PrivateContainerd, direct: KubeletEmulator, tmp_path: Path
) -> None:
    proc = start_enforcer(containerd, tmp_path, grace="1")
    kubelet = KubeletEmulator(proc.relay_socket, log_root=tmp_path / "pods")
    pod = kubelet.run_pod(manifest("stubborn", stubborn()))
    held = cpus_of(pod)
    try:
        call = stop_in_flight(kubelet, pod, 60)
        assert proc.proc is not None
        proc.proc.terminate()
        with pytest.raises(grpc.RpcError) as cut:
            call.result()
        assert cut.value.code() == grpc.StatusCode.UNAVAILABLE, cut.value
        assert proc.stop() == 0, proc.log_tail()
        assert "stopped; state saved" in proc.log_tail()
        # The cut reached containerd too (containerd 1.6 gives up a stop whose caller went
        # away): the container runs on, and the saved state still holds its CPU.
        running = direct.container_status(pod.container_id("app")).state
        assert running == api_pb2.CONTAINER_RUNNING
        assert saved_holders(proc).get(pod.container_id("app")) == str(held)
        # A restarted enforcer holds it too: it is given to nobody else.
        proc.start()
        with pytest.raises(grpc.RpcError) as err:
            kubelet.run_pod(manifest("next", stubborn()))
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert cpus_of(pod) == held
    finally:
        proc.stop()
        kubelet.close(remove_pods=False)
        direct.remove_pod(pod)
