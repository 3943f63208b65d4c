"""The enforcer's state folder at fault, end to end: read-only (a tmpfs remounted read-only),
a state path that cannot be read (a folder where the file should be), a corrupt state file
with containers running. kubelet keeps a CRI endpoint throughout; decisions are refused while
the state cannot be saved; the truth is read from the runtime and the real cgroups."""

from __future__ import annotations

import contextlib
import json
import subprocess
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from enforcer.cri import api_pb2
from enforcer.state.encoding import encode_state
from enforcer.topology import CPUSet
from tests.support.cgroupfs import node_cpus
from tests.support.checks import cpus_of, wait_for
from tests.support.containerd import PrivateContainerd
from tests.support.enforcer_process import EnforcerProcess, free_port
from tests.support.kubelet import KubeletEmulator
from tests.support.pods import guaranteed, manifest, sleeper


# About the state folder, not the runtime: on the system's containerd only (the relay's other
# modules run on containerd 1.7 as well, tests/e2e/conftest.py).
@pytest.fixture(scope="module")
def containerd(containerd16: PrivateContainerd) -> PrivateContainerd:
    return containerd16


pytestmark = pytest.mark.containerd

ALL = node_cpus()
RESERVED = CPUSet.of(min(ALL))


def metric(proc: EnforcerProcess, name: str) -> float:
    with urllib.request.urlopen(proc.metrics_url + "/metrics", timeout=5) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise AssertionError(f"no sample {name}")


def refusal(kubelet: KubeletEmulator, name: str) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as err:
        kubelet.run_pod(manifest(name, sleeper(resources=guaranteed("1"))))
    return err.value


def creates(kubelet: KubeletEmulator, name: str) -> Callable[[], bool]:
    """A predicate: a BestEffort pod can be created (the enforcer decides again)."""

    def attempt() -> bool:
        try:
            kubelet.run_pod(manifest(name, sleeper()))
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.UNAVAILABLE, exc
            return False
        return True

    return attempt


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


def remount(folder: str, mode: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{mode}", folder], check=True)


@pytest.mark.parametrize("saved", [True, False], ids=["with-saved-state", "empty-folder"])
def test_a_read_only_state_folder_still_serves_kubelet(
    enforcer: EnforcerProcess, kubelet: KubeletEmulator, saved: bool
) -> None:
    if saved:
        enforcer.start()
        held = kubelet.run_pod(manifest("held", sleeper(resources=guaranteed("1"))))
        shared = kubelet.run_pod(manifest("shared", sleeper()))
        assert enforcer.stop() == 0
    remount(enforcer.state_dir, "ro")
    enforcer.start()  # before: "cannot start", and kubelet had no runtime at all

    # Read calls pass.
    assert kubelet.version().runtime_name
    listed = {c.id for c in kubelet.list_containers()}
    if saved:
        assert {held.container_id("app"), shared.container_id("app")} <= listed
        assert kubelet.container_status(held.container_id("app")).state == (
            api_pb2.CONTAINER_RUNNING
        )
    # Decisions are refused, naming the folder and the OS error.
    err = refusal(kubelet, "refused")
    assert err.code() == grpc.StatusCode.UNAVAILABLE
    assert enforcer.state_dir in err.details() and "Read-only file system" in err.details()
    assert metric(enforcer, "resource_enforcer_state_writable") == 0
    assert "cannot be written: Read-only file system (EROFS)" in enforcer.log_tail(200)
    out = enforcer.run_cli("status", "--state-dir", enforcer.state_dir)
    assert f"state folder {enforcer.state_dir} cannot be written" in out.stderr
    if saved:
        pinned = cpus_of(held)
        assert pinned == ALL - RESERVED and cpus_of(shared) == RESERVED
        assert out.returncode == 0 and f"cpu{max(pinned)}=e2e/held/app" in out.stdout
        # kubelet's update that changes no request passes and keeps the pinning; a resize
        # (a new CPU or memory value: the policy would have to place it anew) is refused.
        kubelet.update_container_resources(
            held.container_id("app"),
            {"cpu_period": 100000, "cpu_quota": 100000, "cpu_shares": 1024,
             "memory_limit_in_bytes": 64 << 20, "cpuset_cpus": str(ALL)},
        )  # fmt: skip
        assert cpus_of(held) == pinned
        with pytest.raises(grpc.RpcError) as resize:
            kubelet.update_container_resources(
                held.container_id("app"),
                {"cpu_period": 100000, "cpu_quota": 200000, "cpu_shares": 2048,
                 "memory_limit_in_bytes": 128 << 20},
            )  # fmt: skip
        assert resize.value.code() == grpc.StatusCode.UNAVAILABLE
        assert enforcer.state_dir in resize.value.details()
        # Stops and removals pass. The CPU it leaves stays held (a release is a change of
        # the state too) until the state can be written: safe, as nothing else is placed.
        kubelet.remove_pod(held)
        assert cpus_of(shared) == RESERVED

    # Writable again: the enforcer notices, decides again, and releases what went meanwhile.
    remount(enforcer.state_dir, "rw")
    wait_for(creates(kubelet, "after"), why=enforcer.log_tail)
    assert metric(enforcer, "resource_enforcer_state_writable") == 1
    assert "can be written again" in enforcer.log_tail(200)
    if saved:

        def relisted_shared_on_all() -> bool:
            kubelet.list_containers()  # kubelet's relisting shows the removed pod gone
            return cpus_of(shared) == ALL

        wait_for(relisted_shared_on_all, why=enforcer.log_tail)
    assert kubelet.run_pod(manifest("exclusive", sleeper(resources=guaranteed("1"))))
    assert enforcer.stop() == 0, enforcer.log_tail()
    saved_state = json.loads(Path(enforcer.state_dir, "state.json").read_text())
    assert {a["request"]["pod_name"] for a in saved_state["policy"]["admitted"]} >= {
        "after",
        "exclusive",
    }


def test_a_state_path_that_cannot_be_read_refuses_decisions_and_serves(
    enforcer: EnforcerProcess, kubelet: KubeletEmulator
) -> None:
    enforcer.start()
    held = kubelet.run_pod(manifest("held", sleeper(resources=guaranteed("1"))))
    pinned = cpus_of(held)
    assert enforcer.stop() == 0
    state = Path(enforcer.state_dir, "state.json")
    state.unlink()
    state.mkdir()  # the state file replaced by a folder
    enforcer.start()  # before: a traceback, and no relay

    assert kubelet.container_status(held.container_id("app")).state == api_pb2.CONTAINER_RUNNING
    err = refusal(kubelet, "blind")
    assert err.code() == grpc.StatusCode.UNAVAILABLE
    assert str(state) in err.details() and "Is a directory" in err.details()
    assert metric(enforcer, "resource_enforcer_state_writable") == 0
    log = enforcer.log_tail(300)
    assert f"the state file {state} cannot be read: Is a directory (EISDIR)" in log
    assert "Traceback" not in log
    out = enforcer.run_cli("status", "--state-dir", enforcer.state_dir)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stderr.strip() == (
        f"cannot use the state: the state file {state} cannot be read: Is a directory (EISDIR)"
    )
    assert state.is_dir() and cpus_of(held) == pinned  # nothing written over, nothing moved

    # The path fixed: the enforcer reads again (nothing there), adopts what runs, decides.
    state.rmdir()
    wait_for(creates(kubelet, "after"), why=enforcer.log_tail)
    assert cpus_of(held) == pinned
    assert refusal(kubelet, "second").code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert enforcer.stop() == 0, enforcer.log_tail()


def _admitted_in_file(state: Path) -> set[str]:
    try:
        saved = json.loads(state.read_text())
    except (OSError, ValueError):
        return set()
    return {entry["request"]["pod_name"] for entry in saved["policy"]["admitted"]}


def _damage_one_entry(state: Path) -> None:
    saved = json.loads(state.read_text())
    for entry in saved["policy"]["admitted"]:
        if entry["request"]["pod_name"] == "held":
            entry["request"]["cpu_request_milli"] = "one thousand"
    state.write_bytes(encode_state(saved))  # a writer's bug: the checksum matches


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
    state = Path(enforcer.state_dir, "state.json")
    # The decisions reach state.json lazily (the journal holds them first): the damage is to
    # the file, so it must hold both.
    wait_for(lambda: _admitted_in_file(state) == {"held", "shared"}, why=enforcer.log_tail)
    enforcer.kill9()
    damage(state)
    enforcer.start()

    log = enforcer.log_tail(300)
    line = next(line for line in log.splitlines() if "is corrupt" in line)
    assert str(state) in line and "dropped" in line and "moved it to" in line
    assert list(Path(enforcer.state_dir).glob("state.json.corrupt-*"))
    # Reconciliation adopted both running containers: the real cgroups are as before, the
    # held CPU is still held (a new exclusive container is refused), the file is whole again.
    wait_for(lambda: "reconciled with the runtime: 2 containers" in enforcer.log_tail(), why=log)
    assert cpus_of(held) == pinned and cpus_of(shared) == ALL - pinned
    assert refusal(kubelet, "second").code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    saved = json.loads(state.read_text())
    assert {a["request"]["pod_name"]: a["exclusive"] for a in saved["policy"]["admitted"]} == {
        "held": str(pinned),
        "shared": "",
    }
    assert enforcer.stop() == 0, enforcer.log_tail()
