"""The enforcer's state folder at fault, end to end: a corrupt state file with containers
running. The truth is read from the runtime and the real cgroups."""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from enforcer.topology import CPUSet
from tests.support.containerd import PrivateContainerd
from tests.support.enforcer_process import EnforcerProcess, free_port
from tests.support.kubelet import KubeletEmulator, RunningPod
from tests.support.pods import guaranteed, manifest, sleeper

pytestmark = pytest.mark.containerd

ALL = CPUSet.parse(Path("/sys/fs/cgroup/cpuset/cpuset.cpus").read_text())
RESERVED = CPUSet.of(min(ALL))


def wait_for(predicate: Callable[[], bool], why: Callable[[], str], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met in time\n{why()}")
        time.sleep(0.1)


def cpus_of(pod: RunningPod) -> CPUSet:
    return CPUSet.parse(Path(pod.cgroup_path("cpuset", "app"), "cpuset.cpus").read_text())


def refusal(kubelet: KubeletEmulator, name: str) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as err:
        kubelet.run_pod(manifest(name, sleeper(resources=guaranteed("1"))))
    return err.value


@pytest.fixture
def enforcer(containerd: PrivateContainerd, tmp_path: Path) -> Iterator[EnforcerProcess]:
    """An enforcer (not started) whose state folder is a tmpfs of its own."""
    config = tmp_path / "config.yaml"
    config.write_text(f'policy: {{name: static, reservedCPUs: "{RESERVED}"}}\n')
    proc = EnforcerProcess(
        tmp_path / "enforcer",
        runtime_socket=containerd.socket,
        config=str(config),
        metrics_address=f"127.0.0.1:{free_port()}",
    )
    Path(proc.state_dir).mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", proc.state_dir], check=True)
    try:
        yield proc
    finally:
        proc.stop()
        subprocess.run(["umount", "-l", proc.state_dir], check=False)


@pytest.fixture
def kubelet(
    enforcer: EnforcerProcess, containerd: PrivateContainerd, tmp_path: Path
) -> Iterator[KubeletEmulator]:
    emu = KubeletEmulator(enforcer.relay_socket, log_root=tmp_path / "pods")
    try:
        yield emu
    finally:
        # On containerd itself: the enforcer may be stopped by now.
        with KubeletEmulator(containerd.socket) as direct:
            for pod in list(emu.pods.values()):
                with contextlib.suppress(grpc.RpcError):
                    direct.remove_pod(pod)
        emu.close(remove_pods=False)


def _damage_one_entry(state: Path) -> None:
    saved = json.loads(state.read_text())
    for entry in saved["policy"]["admitted"]:
        if entry["request"]["pod_name"] == "held":
            entry["request"]["cpu_request_milli"] = "one thousand"
    state.write_text(json.dumps(saved))


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda state: state.write_bytes(b""), id="zero-bytes"),
        pytest.param(_damage_one_entry, id="one-entry-damaged"),
    ],
)
def test_a_corrupt_state_with_containers_running_is_repaired_from_the_runtime(
    enforcer: EnforcerProcess, kubelet: KubeletEmulator, damage: Callable[[Path], None]
) -> None:
    enforcer.start()
    held = kubelet.run_pod(manifest("held", sleeper(resources=guaranteed("1"))))
    shared = kubelet.run_pod(manifest("shared", sleeper()))
    pinned = cpus_of(held)
    assert cpus_of(shared) == ALL - pinned
    enforcer.kill9()
    state = Path(enforcer.state_dir, "state.json")
    damage(state)
    enforcer.start()

    log = enforcer.log_tail(300)
    line = next(line for line in log.splitlines() if "is corrupt" in line)
    assert str(state) in line and "dropped" in line and "moved it to" in line
    assert list(Path(enforcer.state_dir).glob("state.json.corrupt-*"))
    # Reconciliation adopted both running containers: the real cgroups are as before, the
    # held CPU is still held (a new exclusive container is refused), the file is whole again.
    wait_for(lambda: "reconciled with the runtime: 2 containers" in enforcer.log_tail(), log)
    assert cpus_of(held) == pinned and cpus_of(shared) == ALL - pinned
    assert refusal(kubelet, "second").code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    saved = json.loads(state.read_text())
    assert {a["request"]["pod_name"]: a["exclusive"] for a in saved["policy"]["admitted"]} == {
        "held": str(pinned),
        "shared": "",
    }
    assert enforcer.stop() == 0, enforcer.log_tail()
