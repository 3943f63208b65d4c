"""Faults around the NRI plugin on a real containerd 1.7: the plugin killed with SIGKILL and
started again with containers running, containers started while it was down (NRI is
fail-open) re-pinned when it is back, and containerd restarted under it. Truth is read from
the cgroups. A containerd of this module's own: one test restarts it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from enforcer.topology import CPUSet
from tests.support.containerd17 import NriContainerd, containerd17_available
from tests.support.kubelet import KubeletEmulator, RunningPod
from tests.support.nri_enforcer import NriEnforcerProcess
from tests.support.pods import guaranteed, manifest, sleeper

ALL = CPUSet.parse(Path("/sys/fs/cgroup/cpuset/cpuset.cpus").read_text())
RESERVED = CPUSet.of(min(ALL))
NS = "nri-faults"


@pytest.fixture(scope="module")
def ctrd(containerd17: NriContainerd) -> Iterator[NriContainerd]:
    # containerd17 (the session's) proves 1.7 is here, or fails/skips as the suite says.
    assert containerd17_available() is None
    with NriContainerd() as own:
        yield own


@pytest.fixture
def plugin(ctrd: NriContainerd, tmp_path: Path) -> Iterator[NriEnforcerProcess]:
    config = tmp_path / "config.yaml"
    config.write_text(f'policy: {{name: static, reservedCPUs: "{RESERVED}"}}\n')
    proc = NriEnforcerProcess(tmp_path / "plugin", nri_socket=ctrd.nri_socket, config=str(config))
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def kubelet(ctrd: NriContainerd, plugin: NriEnforcerProcess, tmp_path: Path):
    with KubeletEmulator(ctrd.socket, log_root=tmp_path / "pods") as emu:
        yield emu


def cpus_of(pod: RunningPod) -> CPUSet:
    return CPUSet.parse(Path(pod.cgroup_path("cpuset", "app"), "cpuset.cpus").read_text())


def wait_for(predicate, timeout: float = 15.0, why=lambda: "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met in time\n{why()}")
        time.sleep(0.05)


def exclusive_and_shared(kubelet: KubeletEmulator) -> tuple[RunningPod, RunningPod]:
    shared = kubelet.run_pod(manifest("shared", sleeper(), namespace=NS))
    exclusive = kubelet.run_pod(manifest("excl", sleeper(resources=guaranteed("1")), namespace=NS))
    taken = cpus_of(exclusive)
    assert len(taken) == 1 and not taken & RESERVED
    assert cpus_of(shared) == ALL - taken
    return exclusive, shared


def test_kill_9_and_restart_with_containers_running(
    kubelet: KubeletEmulator, plugin: NriEnforcerProcess
) -> None:
    exclusive, shared = exclusive_and_shared(kubelet)
    taken = cpus_of(exclusive)
    plugin.kill9()
    plugin.start()
    # Nothing moved, and the restarted plugin still knows who holds the exclusive CPU.
    assert cpus_of(exclusive) == taken and cpus_of(shared) == ALL - taken
    with pytest.raises(grpc.RpcError) as refused:
        kubelet.run_pod(manifest("late", sleeper(resources=guaranteed("1")), namespace=NS))
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    kubelet.remove_pod(exclusive)
    wait_for(lambda: cpus_of(shared) == ALL, why=plugin.log_tail)


def test_containers_started_while_the_plugin_was_down_are_re_pinned(
    kubelet: KubeletEmulator, plugin: NriEnforcerProcess
) -> None:
    exclusive, shared = exclusive_and_shared(kubelet)
    taken = cpus_of(exclusive)
    plugin.kill9()
    # NRI is fail-open: with no plugin registered, a container starts unadjusted, on every
    # CPU, the exclusive one included.
    meanwhile = kubelet.run_pod(manifest("meanwhile", sleeper(), namespace=NS))
    assert cpus_of(meanwhile) == ALL
    plugin.start()
    # Synchronize adopts it and moves it off the exclusive CPU.
    wait_for(lambda: cpus_of(meanwhile) == ALL - taken, why=plugin.log_tail)
    assert cpus_of(exclusive) == taken
    # And it is tracked: releasing the exclusive CPU widens it with the others.
    kubelet.remove_pod(exclusive)
    wait_for(lambda: cpus_of(meanwhile) == ALL == cpus_of(shared), why=plugin.log_tail)


def test_containerd_restarted_under_the_plugin(
    ctrd: NriContainerd, kubelet: KubeletEmulator, plugin: NriEnforcerProcess
) -> None:
    exclusive, shared = exclusive_and_shared(kubelet)
    taken = cpus_of(exclusive)
    ctrd.restart()
    # The plugin reads end-of-file, registers again, and is synchronized anew.
    plugin.wait_ready(timeout=20, count=2)
    assert cpus_of(exclusive) == taken and cpus_of(shared) == ALL - taken
    with pytest.raises(grpc.RpcError) as refused:
        kubelet.run_pod(manifest("after", sleeper(resources=guaranteed("1")), namespace=NS))
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    kubelet.remove_pod(exclusive)
    wait_for(lambda: cpus_of(shared) == ALL, why=plugin.log_tail)
    again = kubelet.run_pod(manifest("after", sleeper(resources=guaranteed("1")), namespace=NS))
    assert len(cpus_of(again)) == 1
    wait_for(lambda: cpus_of(shared) == ALL - cpus_of(again), why=plugin.log_tail)
