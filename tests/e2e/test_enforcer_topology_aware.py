"""The topology-aware policy on the real containerd: this machine has one NUMA node and few
CPUs, so the tree is a single pool; what is checked is the apply path (cpus and mems written
to real cgroups) and the re-pinning of shared containers as exclusive CPUs come and go."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from enforcer.topology import CPUSet
from tests.support.cgroupfs import memory_nodes_of, node_cpus
from tests.support.containerd import PrivateContainerd
from tests.support.enforcer_process import EnforcerProcess
from tests.support.kubelet import KubeletEmulator, RunningPod
from tests.support.pods import guaranteed, manifest, sleeper

pytestmark = pytest.mark.containerd

ALL = node_cpus()


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
    # The shared container runs in one pool of the machine's tree: all of a one-node machine,
    # a NUMA node of a machine with several (the VM's 2); its memory on the nodes of its CPUs.
    shared = kubelet.run_pod(manifest("burst", sleeper(resources={"requests": {"cpu": "100m"}})))
    pool = CPUSet.parse(cpuset(shared, "cpuset.cpus"))
    assert pool and pool <= ALL
    assert cpuset(shared, "cpuset.mems") == memory_nodes_of(pool)
    exclusive = kubelet.run_pod(manifest("pinned", sleeper(resources=guaranteed("1"))))
    mine = CPUSet.parse(cpuset(exclusive, "cpuset.cpus"))
    assert len(mine) == 1
    # The shared container, running all along, was moved off the exclusive CPU (if it had it)...
    assert CPUSet.parse(cpuset(shared, "cpuset.cpus")) == pool - mine
    # ...and both have their memory pinned to the node of their CPUs.
    assert cpuset(exclusive, "cpuset.mems") == memory_nodes_of(mine)
    assert cpuset(shared, "cpuset.mems") == memory_nodes_of(pool - mine)
    out = relay.run_cli("status", "--state-dir", relay.state_dir)
    assert "policy topology-aware" in out.stdout and "pinned" in out.stdout
    kubelet.remove_pod(exclusive)
    assert CPUSet.parse(cpuset(shared, "cpuset.cpus")) == pool


# Two CPUs, one reserved: the machine of issue 11's defect 7 (this one, where it has 2 CPUs;
# availableCPUs makes any machine look like it).
SPARE, ONLY = sorted(ALL)[:2]


@pytest.fixture
def two_cpu_relay(containerd: PrivateContainerd, tmp_path: Path) -> Iterator[EnforcerProcess]:
    config = tmp_path / "config.yaml"
    config.write_text(
        "policy: {name: topology-aware, pinMemory: true, "
        f'availableCPUs: "{SPARE},{ONLY}", reservedCPUs: "{SPARE}"}}\n'
    )
    proc = EnforcerProcess(
        tmp_path / "enforcer", runtime_socket=containerd.socket, config=str(config)
    )
    proc.start()
    try:
        yield proc
    finally:
        assert proc.stop() == 0, proc.log_tail()


def test_one_reserved_of_two_cpus_still_grants_the_other(
    two_cpu_relay: EnforcerProcess, tmp_path: Path
) -> None:
    with KubeletEmulator(two_cpu_relay.relay_socket, log_root=tmp_path / "pods") as kubelet:
        best_effort = kubelet.run_pod(manifest("be", sleeper()))
        assert CPUSet.parse(cpuset(best_effort, "cpuset.cpus")) == CPUSet.of(ONLY)
        pinned = kubelet.run_pod(manifest("g1", sleeper(resources=guaranteed("1"))))
        # The Guaranteed 1-CPU container has the unreserved CPU to itself, as under static ...
        assert CPUSet.parse(cpuset(pinned, "cpuset.cpus")) == CPUSet.of(ONLY)
        # ... and the BestEffort container, running all along, moved to the reserved CPU.
        assert CPUSet.parse(cpuset(best_effort, "cpuset.cpus")) == CPUSet.of(SPARE)
        kubelet.remove_pod(pinned)
        assert CPUSet.parse(cpuset(best_effort, "cpuset.cpus")) == CPUSet.of(ONLY)


def test_status_of_a_stopped_enforcer_as_json(
    two_cpu_relay: EnforcerProcess, tmp_path: Path
) -> None:
    with KubeletEmulator(two_cpu_relay.relay_socket, log_root=tmp_path / "pods") as kubelet:
        pinned = kubelet.run_pod(manifest("g1", sleeper(resources=guaranteed("1"))))
        best_effort = kubelet.run_pod(manifest("be", sleeper()))
        assert two_cpu_relay.stop() == 0  # the state is saved on the way out
        try:
            out = two_cpu_relay.run_cli(
                "status", "--state-dir", two_cpu_relay.state_dir, "--output", "json"
            )
            assert out.returncode == 0, out.stderr
            shown = json.loads(out.stdout)
            table = two_cpu_relay.run_cli("status", "--state-dir", two_cpu_relay.state_dir)
            assert table.returncode == 0 and "e2e/g1/app" in table.stdout, table.stderr
        finally:
            two_cpu_relay.start()  # for the pods' removal
    assert shown["policy"] == "topology-aware"
    assert (shown["availableCPUs"], shown["reservedCPUs"]) == (
        str(CPUSet.of(SPARE, ONLY)),
        str(SPARE),
    )
    rows = {c["pod"]: c for c in shown["containers"]}
    assert rows["g1"]["containerID"] == pinned.container_id("app")
    assert rows["be"]["containerID"] == best_effort.container_id("app")
    assert (rows["g1"]["qos"], rows["g1"]["kind"], rows["g1"]["exclusiveCPUs"]) == (
        "Guaranteed",
        "exclusive",
        str(ONLY),
    )
    assert (rows["be"]["qos"], rows["be"]["cpus"], rows["be"]["exclusiveCPUs"]) == (
        "BestEffort",
        str(SPARE),
        "",
    )
    assert [p["name"] for p in shown["pools"]] == ["root"]
    by_cpu = {c["cpu"]: c for c in shown["cpus"]}
    assert (by_cpu[ONLY]["use"], by_cpu[ONLY]["holder"]) == ("exclusive", "e2e/g1/app")
    assert (by_cpu[SPARE]["use"], by_cpu[SPARE]["holder"]) == ("reserved", None)
    others = set(by_cpu) - {SPARE, ONLY}
    assert all(by_cpu[c]["use"] == "unavailable" for c in others)
    assert all({"socket", "node", "core"} <= set(by_cpu[c]) for c in by_cpu)
