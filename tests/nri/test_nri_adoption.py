"""A Guaranteed pod that started while the NRI plugin was down, when its CPU was taken: adopted
onto the shared pool by the plugin's Synchronize, reported by `status` meanwhile, and moved onto
a CPU of its own as soon as one is free. Truth is read from the cgroups of a real containerd
1.7 (a containerd of this module's own)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.nri.test_nri_faults import ALL, NS, cpus_of, wait_for
from tests.support.containerd17 import NriContainerd, containerd17_available
from tests.support.kubelet import KubeletEmulator, RunningPod
from tests.support.nri_enforcer import NriEnforcerProcess
from tests.support.pods import guaranteed, manifest, sleeper

RESERVED = min(ALL)


@pytest.fixture(scope="module")
def ctrd(containerd17: NriContainerd) -> Iterator[NriContainerd]:
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


def problem_of(plugin: NriEnforcerProcess, pod: RunningPod) -> str | None:
    out = plugin.run_cli("status", "--state-dir", plugin.state_dir, "--output", "json")
    rows = [r for r in json.loads(out.stdout)["containers"] if r["pod"] == pod.name]
    assert len(rows) == 1, out.stdout
    return rows[0]["problem"]


def test_a_guaranteed_pod_adopted_as_shared_gets_its_cpu_once_one_is_free(
    kubelet: KubeletEmulator, plugin: NriEnforcerProcess
) -> None:
    holder = kubelet.run_pod(manifest("holder", sleeper(resources=guaranteed("1")), namespace=NS))
    taken = cpus_of(holder)
    assert len(taken) == 1 and RESERVED not in taken
    plugin.kill9()
    # NRI is fail-open: the pod starts unadjusted, on every CPU.
    late = kubelet.run_pod(manifest("late", sleeper(resources=guaranteed("1")), namespace=NS))
    assert cpus_of(late) == ALL
    plugin.start()
    # Synchronize adopts it; its CPU is the holder's, so it goes to the shared pool, reported.
    wait_for(lambda: cpus_of(late) == ALL - taken, why=plugin.log_tail)
    assert cpus_of(holder) == taken
    problem = problem_of(plugin, late)
    assert problem is not None and "until the CPUs it asks for are free" in problem

    kubelet.remove_pod(holder)
    # The next periodic pass places it as asked: a CPU of its own, read from its cgroup.
    wait_for(lambda: cpus_of(late) == taken, timeout=30, why=plugin.log_tail)
    wait_for(lambda: problem_of(plugin, late) is None, timeout=15, why=plugin.log_tail)
    assert "placed as asked now that its CPUs are free" in plugin.log_tail(400)
