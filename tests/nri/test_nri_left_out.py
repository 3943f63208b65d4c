"""The NRI plugin is never left out for good, on a real containerd 1.7.24: a Synchronize bigger
than ttrpc's 4 MiB (pods with big, legal annotations) after the plugin was killed and started
again is taken, and exclusivity holds throughout; the health file and the DaemonSet's liveness
probe say "not synchronized" while the plugin is left out. Truth is read from the cgroups.

A containerd of this module's own: the big pods stay on it until the module ends."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from enforcer.topology import CPUSet
from tests.support.cgroupfs import node_cpus
from tests.support.containerd17 import NriContainerd, containerd17_available
from tests.support.kubelet import KubeletEmulator
from tests.support.manifests import kustomize
from tests.support.nri_enforcer import NriEnforcerProcess, cpus_of, health, wait_for
from tests.support.pods import guaranteed, manifest, sleeper

ALL = node_cpus()
RESERVED = CPUSet.of(min(ALL))
NS = "nri-left-out"
# Kubernetes caps all annotations of a pod together at 256 KiB: 230 KiB is legal, and twenty
# such pods make containerd's Synchronize about 4.8 MB, over ttrpc's 4 MiB.
BIG = {"example.com/blob": "x" * (230 << 10)}
BIG_PODS = 20


@pytest.fixture(scope="module")
def ctrd(containerd17: NriContainerd) -> Iterator[NriContainerd]:
    assert containerd17_available() is None
    with NriContainerd() as own:
        yield own


def plugin_process(ctrd: NriContainerd, tmp_path: Path, name: str = "plugin") -> NriEnforcerProcess:
    config = tmp_path / "config.yaml"
    config.write_text(f'policy: {{name: static, reservedCPUs: "{RESERVED}"}}\n')
    health_file = tmp_path / f"{name}.health"
    return NriEnforcerProcess(
        tmp_path / name,
        nri_socket=ctrd.nri_socket,
        config=str(config),
        extra_args=["--health-file", str(health_file)],
    )


def test_an_oversized_synchronize_after_a_restart_is_taken_and_exclusivity_holds(
    ctrd: NriContainerd, tmp_path: Path
) -> None:
    plugin = plugin_process(ctrd, tmp_path)
    health_file = tmp_path / "plugin.health"
    plugin.start()
    try:
        with KubeletEmulator(ctrd.socket, log_root=tmp_path / "pods") as kubelet:
            exclusive = kubelet.run_pod(
                manifest("excl", sleeper(resources=guaranteed("1")), namespace=NS)
            )
            taken = cpus_of(exclusive)
            assert len(taken) == 1 and not taken & RESERVED
            big = [
                kubelet.run_pod(manifest(f"big{i}", sleeper(), namespace=NS, annotations=BIG))
                for i in range(BIG_PODS)
            ]
            wait_for(lambda: all(cpus_of(p) == ALL - taken for p in big), why=plugin.log_tail)

            plugin.kill9()
            plugin.start(wait=False)
            # containerd sends every pod with its annotations in one Synchronize: the plugin
            # takes it, and says so in its health file (what the DaemonSet's probes read).
            wait_for(lambda: health(health_file) == "serving", timeout=60, why=plugin.log_tail)
            assert "exceeds the maximum" not in ctrd.log_tail(400), ctrd.log_tail(40)
            # Nothing moved, and the plugin still knows who holds the exclusive CPU.
            assert cpus_of(exclusive) == taken
            assert all(cpus_of(p) == ALL - taken for p in big)

            # Registered: new containers are adjusted. The exclusive CPU freed, a new
            # Guaranteed pod gets it, and a Burstable one does not run on it.
            kubelet.remove_pod(exclusive)
            wait_for(lambda: all(cpus_of(p) == ALL for p in big), why=plugin.log_tail)
            again = kubelet.run_pod(
                manifest("again", sleeper(resources=guaranteed("1")), namespace=NS)
            )
            mine = cpus_of(again)
            assert len(mine) == 1 and not mine & RESERVED
            burstable = kubelet.run_pod(
                manifest("burst", sleeper(resources={"requests": {"cpu": "100m"}}), namespace=NS)
            )
            assert cpus_of(burstable) == ALL - mine
            wait_for(lambda: all(cpus_of(p) == ALL - mine for p in big), why=plugin.log_tail)
    finally:
        plugin.stop()


def probe(kind: str, health_file: Path) -> int:
    """The exit code of deploy/nri's DaemonSet's probe (as kubectl kustomize renders it) run
    on this test's health file."""
    overlay = kustomize(Path(__file__).resolve().parents[2] / "deploy" / "nri")
    (daemonset,) = [d for d in overlay if d["kind"] == "DaemonSet"]
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    command = [
        a.replace("/tmp/enforcer.health", str(health_file))
        for a in container[kind]["exec"]["command"]
    ]
    if command[0] == "python":  # the image's name for it
        command[0] = sys.executable
    return subprocess.run(command, capture_output=True, timeout=30).returncode


# NRI's multiplexer caps a frame at 16 MiB, so containerd 1.7 cannot send a Synchronize over
# about that: 70 pods of 250 KiB of annotations each (a node may hold 110 such legal pods).
HUGE = {"example.com/blob": "y" * (250 << 10)}
HUGE_PODS = 70


def test_left_out_by_a_synchronize_the_runtime_cannot_send_it_says_so_and_recovers(
    ctrd: NriContainerd, tmp_path: Path
) -> None:
    plugin = plugin_process(ctrd, tmp_path)
    health_file = tmp_path / "plugin.health"
    plugin.start()
    try:
        with KubeletEmulator(ctrd.socket, log_root=tmp_path / "pods") as kubelet:
            wait_for(lambda: health(health_file) == "serving", why=plugin.log_tail)
            assert probe("livenessProbe", health_file) == 0
            huge = [
                kubelet.run_pod_sandbox(manifest(f"huge{i}", namespace=NS, annotations=HUGE))
                for i in range(HUGE_PODS)
            ]
            plugin.kill9()
            plugin.start(wait=False)
            # containerd fails to send the Synchronize and keeps the connection open; the
            # plugin notices, closes it and registers again (and again, with backoff), and
            # says "not synchronized": the DaemonSet's liveness probe fails, its readiness too.
            wait_for(
                lambda: plugin.log_since_start().count("registered with the runtime") >= 2,
                timeout=90,
                why=plugin.log_tail,
            )
            wait_for(
                lambda: "failed to synchronize plugin: message too long" in ctrd.log_tail(400),
                why=lambda: f"{ctrd.log_tail(30)}\n{plugin.log_tail(30)}",
            )
            assert "left out by the runtime" in plugin.log_since_start()
            wait_for(lambda: health(health_file) == "not-synchronized", why=plugin.log_tail)
            assert probe("livenessProbe", health_file) != 0
            assert probe("readinessProbe", health_file) != 0

            # The big pods gone, the next registration is synchronized: alive and serving
            # again without a restart, and new containers are adjusted.
            for pod in huge:
                kubelet.remove_pod(pod)
            wait_for(lambda: health(health_file) == "serving", timeout=90, why=plugin.log_tail)
            assert probe("livenessProbe", health_file) == 0
            assert plugin.proc is not None and plugin.proc.poll() is None
            exclusive = kubelet.run_pod(
                manifest("excl2", sleeper(resources=guaranteed("1")), namespace=NS)
            )
            mine = cpus_of(exclusive)
            assert len(mine) == 1 and not mine & RESERVED
            burstable = kubelet.run_pod(
                manifest("burst2", sleeper(resources={"requests": {"cpu": "100m"}}), namespace=NS)
            )
            assert cpus_of(burstable) == ALL - mine
    finally:
        plugin.stop()


@pytest.mark.parametrize(
    ("word", "alive", "ready"),
    [("serving", True, True), ("standby", True, False), ("not-synchronized", False, False)],
)
def test_the_daemonsets_probes_read_the_health_files_words(
    word: str, alive: bool, ready: bool, tmp_path: Path
) -> None:
    health_file = tmp_path / "health"
    health_file.write_text(word + "\n")
    assert (probe("livenessProbe", health_file) == 0) == alive
    assert (probe("readinessProbe", health_file) == 0) == ready
    # A file nobody rewrote for over a minute: the process is stuck, whatever it says.
    old = time.time() - 120
    os.utime(health_file, (old, old))
    assert probe("livenessProbe", health_file) != 0
