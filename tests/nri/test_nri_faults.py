"""Faults around the NRI plugin on each real containerd with NRI (tests/nri/conftest.py): the
plugin killed with SIGKILL and started again with containers running, containers started while
it was down (NRI is fail-open) re-pinned when it is back, and containerd restarted under it.
Truth is read from the cgroups. A containerd of this module's own: one test restarts it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

from enforcer.topology import CPUSet
from tests.support.cgroupfs import node_cpus
from tests.support.checks import cpus_of, wait_for
from tests.support.kubelet import KubeletEmulator, RunningPod
from tests.support.nri_enforcer import NriEnforcerProcess
from tests.support.pods import guaranteed, manifest, sleeper
from tests.support.runtimes import NriContainerd, private_runtime

ALL = node_cpus()
RESERVED = CPUSet.of(min(ALL))
NS = "nri-faults"


@pytest.fixture(scope="module")
def ctrd(nri_containerd: NriContainerd) -> Iterator[NriContainerd]:
    # nri_containerd (the session's) proves the release is here, or fails as the suite says.
    with private_runtime(nri_containerd.release) as own:
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


def test_a_hung_plugin_never_hangs_the_runtime(
    ctrd: NriContainerd, kubelet: KubeletEmulator, plugin: NriEnforcerProcess
) -> None:
    exclusive, shared = exclusive_and_shared(kubelet)
    taken = cpus_of(exclusive)
    assert plugin.proc is not None
    # The plugin stops answering altogether (a stuck engine, a stopped process): containerd
    # gives up on it after its 2 s request timeout, drops it, and goes on without it.
    os.kill(plugin.proc.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        stalled = kubelet.run_pod(manifest("stalled", sleeper(), namespace=NS))
        took = time.monotonic() - started
    finally:
        os.kill(plugin.proc.pid, signal.SIGCONT)
    # Not kubelet's 2-minute CRI timeout: containerd's own 2 s per NRI request, a few times.
    assert took < 15, f"the runtime waited {took:.1f}s for a stopped plugin"
    assert "closing plugin 90-resource-enforcer" in ctrd.log_tail(200)
    # Back, the plugin finds its connection dropped, registers again, is synchronized, and
    # moves what started unadjusted meanwhile off the exclusive CPU.
    plugin.wait_ready(timeout=20, count=2)
    wait_for(lambda: cpus_of(stalled) == ALL - taken, why=plugin.log_tail)
    assert cpus_of(exclusive) == taken and cpus_of(shared) == ALL - taken
    with pytest.raises(grpc.RpcError) as refused:
        kubelet.run_pod(manifest("after", sleeper(resources=guaranteed("1")), namespace=NS))
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


def run_as_kubelet(kubelet: KubeletEmulator, pod: dict) -> RunningPod:
    """run_pod, retried as kubelet retries when the plugin answered UNAVAILABLE (its engine did
    not decide within 1.5 s: the plugin's way to stay inside containerd's 2 s)."""
    for _ in range(5):
        try:
            return kubelet.run_pod(pod)
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.UNAVAILABLE:
                raise
    return kubelet.run_pod(pod)


def test_a_burst_under_cpu_load_is_answered_without_the_plugin_being_dropped(
    ctrd: NriContainerd, kubelet: KubeletEmulator, plugin: NriEnforcerProcess
) -> None:
    # Every CPU busy, and eight pods at once (one of them asking for the one exclusive CPU):
    # every request must be answered within containerd's 2 s, or containerd drops the plugin
    # and the pods after it start unadjusted.
    log_before = len(ctrd.log_tail(100000))
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(len(ALL))]
    try:
        manifests = [manifest(f"burst{i}", sleeper(), namespace=NS) for i in range(7)]
        manifests.append(manifest("burst-g", sleeper(resources=guaranteed("1")), namespace=NS))
        with ThreadPoolExecutor(len(manifests)) as pool:
            pods = list(pool.map(run_as_kubelet, [kubelet] * len(manifests), manifests))
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert "closing plugin" not in ctrd.log_tail(100000)[log_before:], ctrd.log_tail(50)
    assert plugin.synchronizations() == 1, plugin.log_tail()
    exclusive, shared = pods[-1], pods[:-1]
    taken = cpus_of(exclusive)
    assert len(taken) == 1 and not taken & RESERVED
    wait_for(lambda: all(cpus_of(p) == ALL - taken for p in shared), why=plugin.log_tail)
