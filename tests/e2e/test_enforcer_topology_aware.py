"""The topology-aware policy on the real containerd: this machine has one NUMA node and few
CPUs, so the tree is a single pool; what is checked is the apply path (cpus and mems written
to real cgroups) and the re-pinning of shared containers as exclusive CPUs come and go."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from enforcer.topology import CPUSet
from tests.support.containerd import PrivateContainerd
from tests.support.enforcer_process import EnforcerProcess
from tests.support.kubelet import KubeletEmulator, RunningPod
from tests.support.pods import guaranteed, manifest, sleeper

pytestmark = pytest.mark.containerd

ALL = CPUSet.parse(Path("/sys/fs/cgroup/cpuset/cpuset.cpus").read_text())
MEMS = Path("/sys/fs/cgroup/cpuset/cpuset.mems").read_text().strip()


@pytest.fixture(scope="module")
def relay(
    containerd: PrivateContainerd, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EnforcerProcess]:
    workdir = tmp_path_factory.mktemp("topology-aware")
    config = workdir / "config.yaml"
    config.write_text("policy: {name: topology-aware, pinMemory: true}\n")
    proc = EnforcerProcess(workdir, runtime_socket=containerd.socket, config=str(config))
    proc.start()
    try:
        yield proc
    finally:
        assert proc.stop() == 0, proc.log_tail()


@pytest.fixture
def kubelet(relay: EnforcerProcess, tmp_path: Path) -> Iterator[KubeletEmulator]:
    with KubeletEmulator(relay.relay_socket, log_root=tmp_path / "pods") as emu:
        yield emu


def cpuset(pod: RunningPod, file: str) -> str:
    return Path(pod.cgroup_path("cpuset", "app"), file).read_text().strip()


def test_exclusive_and_shared_with_memory_pinned(
    kubelet: KubeletEmulator, relay: EnforcerProcess
) -> None:
    shared = kubelet.run_pod(manifest("burst", sleeper(resources={"requests": {"cpu": "100m"}})))
    assert CPUSet.parse(cpuset(shared, "cpuset.cpus")) == ALL
    exclusive = kubelet.run_pod(manifest("pinned", sleeper(resources=guaranteed("1"))))
    mine = CPUSet.parse(cpuset(exclusive, "cpuset.cpus"))
    assert len(mine) == 1
    # The shared container, running all along, was moved off the exclusive CPU...
    assert CPUSet.parse(cpuset(shared, "cpuset.cpus")) == ALL - mine
    # ...and both have their memory pinned to the node of their CPUs.
    assert cpuset(exclusive, "cpuset.mems") == MEMS == cpuset(shared, "cpuset.mems")
    out = relay.run_cli("status", "--state-dir", relay.state_dir)
    assert "policy topology-aware" in out.stdout and "pinned" in out.stdout
    kubelet.remove_pod(exclusive)
    assert CPUSet.parse(cpuset(shared, "cpuset.cpus")) == ALL
