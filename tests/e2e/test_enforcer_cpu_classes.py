"""CPU classes through the real enforcer process on the real containerd: the frequencies and
C-states of a class written on the CPUs the policy gives it, and put back as they were when the
enforcer gets SIGTERM (also when a process killed with SIGKILL left them set).

This machine has no cpufreq driver, so `--sysfs-root` points at a copy of a real desktop's
sysfs snapshot (its CPUs 0 and 1 are on NUMA node 0, as this machine's are) with the
cpufreq, cpuidle and intel_uncore_frequency files the kernel documents added
(tests/support/fake_cpufreq.py). The containers, cgroups and the relay are real; the
policy is kept to this machine's two CPUs with `availableCPUs`."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from enforcer.sysfs import read_topology
from enforcer.topology import CPUSet
from tests.support.cgroupfs import node_cpus
from tests.support.containerd import PrivateContainerd
from tests.support.enforcer_process import EnforcerProcess
from tests.support.fake_cpufreq import SCALING_MAX, SCALING_MIN, class_files, make_sysfs, read
from tests.support.kubelet import KubeletEmulator, RunningPod
from tests.support.pods import guaranteed, manifest, sleeper
from tests.support.snapshots import extract_snapshots

pytestmark = pytest.mark.containerd


# About the node's sysfs, not the runtime: on the system's containerd only (the relay's other
# modules run on containerd 1.7 as well, tests/e2e/conftest.py).
@pytest.fixture(scope="module")
def containerd(containerd16: PrivateContainerd) -> PrivateContainerd:
    return containerd16


ALL = node_cpus()
RESERVED, SPARE = sorted(ALL)[:2]
CLASSES = (
    "cpuClasses:\n"
    "  turbo: {minFreq: 3200000, maxFreq: 3800000, uncoreMinFreq: 2000000,"
    " disabledCstates: [C6, C1E]}\n"
)
BALLOONS = (
    f'policy:\n  name: balloons\n  availableCPUs: "{RESERVED},{SPARE}"\n'
    f'  reservedCPUs: "{RESERVED}"\n'
    "  balloonTypes:\n"
    "    - {name: fast, namespaces: [ai], minCPUs: 1, maxCPUs: 1, minBalloons: 1,"
    " maxBalloons: 1, cpuClass: turbo}\n" + CLASSES
)
TOPOLOGY_AWARE = (
    f'policy:\n  name: topology-aware\n  availableCPUs: "{RESERVED},{SPARE}"\n'
    f'  reservedCPUs: "{RESERVED}"\n' + CLASSES
)


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    """A real desktop's topology plus the CPU-class files, as the enforcer's /sys."""
    root = extract_snapshots(tmp_path / "snapshot", ["desktop"])["desktop"]
    return make_sysfs(root, read_topology(root))


def enforcer(
    tmp_path: Path, containerd: PrivateContainerd, sysfs: Path, config: str
) -> EnforcerProcess:
    (tmp_path / "config.yaml").write_text(config)
    return EnforcerProcess(
        tmp_path / "enforcer",
        runtime_socket=containerd.socket,
        config=str(tmp_path / "config.yaml"),
        extra_args=["--sysfs-root", str(sysfs)],
    )


def in_turbo(sysfs: Path, cpu: int) -> bool:
    """Whether every file of the class shows the class's value on `cpu` (and its die)."""
    values = (
        read(sysfs, f"cpu{cpu}/cpufreq/scaling_min_freq"),
        read(sysfs, f"cpu{cpu}/cpufreq/scaling_max_freq"),
        read(sysfs, f"cpu{cpu}/cpuidle/state2/disable"),  # C1E
        read(sysfs, f"cpu{cpu}/cpuidle/state3/disable"),  # C6
        read(sysfs, "intel_uncore_frequency/package_00_die_00/min_freq_khz"),
    )
    return values == ("3200000", "3800000", "1", "1", "2000000")


def eventually(check: Callable[[], bool], timeout: float = 15.0) -> bool:
    """Whether `check` holds within `timeout` (the relay answers before the enforcer has read
    the runtime's containers; the balloons' classes are written then)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def cpus(pod: RunningPod) -> CPUSet:
    return CPUSet.parse(Path(pod.cgroup_path("cpuset", "app"), "cpuset.cpus").read_text())


def test_a_balloon_types_class_is_written_and_put_back_at_sigterm(
    containerd: PrivateContainerd, sysfs: Path, tmp_path: Path
) -> None:
    before = class_files(sysfs)
    proc = enforcer(tmp_path, containerd, sysfs, BALLOONS)
    proc.start()
    try:
        # fast[0] exists from the start on the spare CPU: its class is there before any pod.
        assert eventually(lambda: in_turbo(sysfs, SPARE))
        assert read(sysfs, f"cpu{RESERVED}/cpufreq/scaling_max_freq") == str(SCALING_MAX)
        with KubeletEmulator(proc.relay_socket, log_root=tmp_path / "pods") as kubelet:
            model = kubelet.run_pod(
                manifest("model", sleeper(resources={"requests": {"cpu": "500m"}}), namespace="ai")
            )
            assert cpus(model) == CPUSet.of(SPARE)  # the real cgroup: in the balloon
            status = proc.run_cli("status", "--state-dir", proc.state_dir)
            rows = [line.split() for line in status.stdout.splitlines()]
            assert ["turbo", "1", str(SPARE)] in rows, status.stdout  # the CPU-CLASS table
            kubelet.remove_pod(model)
        assert in_turbo(sysfs, SPARE)  # minBalloons keeps the balloon and its class
    finally:
        code = proc.stop()
    assert code == 0, proc.log_tail()
    assert class_files(sysfs) == before


def test_a_process_killed_leaves_the_originals_to_the_next_one(
    containerd: PrivateContainerd, sysfs: Path, tmp_path: Path
) -> None:
    before = class_files(sysfs)
    proc = enforcer(tmp_path, containerd, sysfs, BALLOONS)
    proc.start()
    assert eventually(lambda: in_turbo(sysfs, SPARE))
    proc.kill9()  # at once: the originals were saved before the first write
    assert in_turbo(sysfs, SPARE)  # nobody put them back
    offset = len(proc.log_path.read_bytes())
    proc.start()  # reads the originals from its state file, finds the class's values
    assert eventually(lambda: b"reconciled with" in proc.log_path.read_bytes()[offset:])
    assert proc.stop() == 0, proc.log_tail()
    assert class_files(sysfs) == before
    assert read(sysfs, f"cpu{SPARE}/cpufreq/scaling_min_freq") == str(SCALING_MIN)


def test_topology_aware_exclusive_cpus_take_the_annotations_class(
    containerd: PrivateContainerd, sysfs: Path, tmp_path: Path
) -> None:
    before = class_files(sysfs)
    proc = enforcer(tmp_path, containerd, sysfs, TOPOLOGY_AWARE)
    proc.start()
    try:
        with KubeletEmulator(proc.relay_socket, log_root=tmp_path / "pods") as kubelet:
            pinned = kubelet.run_pod(
                manifest(
                    "pinned",
                    sleeper(resources=guaranteed("1")),
                    annotations={"cpuclass.resource-enforcer.dev/container.app": "turbo"},
                )
            )
            assert cpus(pinned) == CPUSet.of(SPARE)  # its own CPU, read from its cgroup
            assert in_turbo(sysfs, SPARE)
            kubelet.remove_pod(pinned)
            assert class_files(sysfs) == before  # the CPU left the class with its container
            with pytest.raises(Exception, match='CPU class "turob" is not configured'):
                kubelet.run_pod(
                    manifest(
                        "typo",
                        sleeper(resources=guaranteed("1")),
                        annotations={"cpuclass.resource-enforcer.dev/pod": "turob"},
                    )
                )
    finally:
        code = proc.stop()
    assert code == 0, proc.log_tail()
    assert class_files(sysfs) == before
