"""RDT, block-I/O and scheduling classes end to end: the enforcer (console script) in front of
the real containerd, resctrl faked in a folder laid out as the kernel's (this machine has no
RDT), block I/O on this machine's real disk and real cgroup v1 blkio files, scheduling classes
read back from the container's real processes with chrt, ionice and procfs."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from tests.support.cgroupfs import thread_ids, throttle
from tests.support.containerd import PrivateContainerd
from tests.support.disks import whole_disk
from tests.support.enforcer_process import EnforcerProcess
from tests.support.fake_resctrl import FakeResctrl, ResctrlShape
from tests.support.kubelet import KubeletEmulator, RunningPod
from tests.support.pods import manifest, sleeper
from tests.support.sched_truth import ionice_of, nice_of, policy_of

pytestmark = pytest.mark.containerd


def _disk() -> tuple[str, str]:
    """(device path, "MAJ:MIN") of a whole-disk block device of this machine."""
    found = whole_disk()
    if found is None:
        pytest.fail("no whole-disk block device (/dev/vda, /dev/sda, ...) on this machine")
    path, major, minor = found
    return path, f"{major}:{minor}"


DISK, DISK_KEY = _disk()


def config_text(read_bps: str) -> str:
    return f"""\
policy: {{name: static, reservedCPUs: "0"}}
rdt:
  partitions:
    shared:
      l3Allocation: "100%"
      classes:
        gold: {{l3Allocation: "60%"}}
        silver: {{l3Allocation: "0-3"}}
blockio:
  Classes:
    throttled:
      - Devices: ["{DISK}"]
        ThrottleReadBps: {read_bps}
        ThrottleWriteIOPS: 300
schedulingClasses:
  background: {{policy: idle, nice: 10, ioClass: idle}}
  realtime: {{policy: fifo, priority: 10}}
classAccess:
  rdt: {{gold: ["e2e", "prod-*"]}}
  scheduling: {{realtime: ["rt-*"]}}
verify: {{periodSeconds: 1}}
"""


@pytest.fixture(scope="module")
def setup(
    containerd: PrivateContainerd, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[EnforcerProcess, FakeResctrl, Path]]:
    workdir = tmp_path_factory.mktemp("classes")
    resctrl = FakeResctrl(workdir / "resctrl", ResctrlShape())
    config = workdir / "config.yaml"
    config.write_text(config_text("50M"))
    proc = EnforcerProcess(
        workdir / "enforcer",
        runtime_socket=containerd.socket,
        config=str(config),
        extra_args=["--resctrl-root", str(resctrl.root)],
    )
    proc.start()
    try:
        yield proc, resctrl, config
    finally:
        assert proc.stop() == 0, proc.log_tail()


@pytest.fixture
def kubelet(setup, tmp_path: Path) -> Iterator[KubeletEmulator]:
    with KubeletEmulator(setup[0].relay_socket, log_root=tmp_path / "pods") as emu:
        yield emu


def classy(name: str, namespace: str = "e2e", **annotations: str) -> dict:
    return manifest(name, sleeper(), namespace=namespace, annotations=annotations)


def tids(pod: RunningPod) -> set[int]:
    return thread_ids(pod.cgroup_path("cpuset", "app"))


def blkio(pod: RunningPod, name: str) -> str:
    return throttle(pod.cgroup_path("blkio", "app"), name)


def test_rdt_class_holds_the_containers_real_processes(setup, kubelet: KubeletEmulator) -> None:
    _, resctrl, _ = setup
    pod = kubelet.run_pod(classy("cached", **{"rdtclass.resource-enforcer.dev/pod": "gold"}))
    group = resctrl.root / "gold"
    assert tids(pod) and tids(pod) <= {int(t) for t in (group / "tasks").read_text().split()}
    # 60% of an 11-bit mask, on both cache ids.
    assert (group / "schemata").read_text().strip() == "L3:0=7f;1=7f"
    assert (resctrl.root / "silver" / "schemata").read_text().strip() == "L3:0=f;1=f"


def test_beta_dialect_classes_are_taken_over_from_the_runtime(
    setup, kubelet: KubeletEmulator
) -> None:
    # containerd reads these annotations itself (from CreateContainer), CRI-O too (from the
    # sandbox), and each would refuse the container ("RDT not initialized"): the enforcer
    # applies the classes and keeps them from the runtime.
    _, resctrl, _ = setup
    pod = kubelet.run_pod(
        classy(
            "beta",
            **{
                "rdt.resources.beta.kubernetes.io/pod": "silver",
                "blockio.resources.beta.kubernetes.io/pod": "throttled",
            },
        )
    )
    assert tids(pod) <= {int(t) for t in (resctrl.root / "silver" / "tasks").read_text().split()}
    assert blkio(pod, "read_bps") == f"{DISK_KEY} 50000000\n"


def test_blockio_class_writes_the_real_disks_throttles(setup, kubelet: KubeletEmulator) -> None:
    pod = kubelet.run_pod(
        classy("throttled", **{"blockio.resources.beta.kubernetes.io/pod": "throttled"})
    )
    assert blkio(pod, "read_bps") == f"{DISK_KEY} 50000000\n"
    assert blkio(pod, "write_iops") == f"{DISK_KEY} 300\n"


def test_changed_class_definitions_reach_running_containers(
    setup, kubelet: KubeletEmulator
) -> None:
    proc, _, config = setup
    pod = kubelet.run_pod(
        classy("live", **{"blockioclass.resource-enforcer.dev/container.app": "throttled"})
    )
    assert blkio(pod, "read_bps") == f"{DISK_KEY} 50000000\n"
    try:
        config.write_text(config_text("20M"))
        deadline = time.monotonic() + 15
        while blkio(pod, "read_bps") != f"{DISK_KEY} 20000000\n":
            assert time.monotonic() < deadline, proc.log_tail()
            time.sleep(0.1)
        # A refused configuration keeps the last good one.
        config.write_text(config_text("20M") + "bogus: 1\n")
        deadline = time.monotonic() + 15
        while "bogus: Extra inputs are not permitted" not in proc.log_tail(400):
            assert time.monotonic() < deadline, proc.log_tail()
            time.sleep(0.1)
        assert blkio(pod, "read_bps") == f"{DISK_KEY} 20000000\n"
    finally:
        config.write_text(config_text("50M"))
        deadline = time.monotonic() + 15
        while blkio(pod, "read_bps") != f"{DISK_KEY} 50000000\n":
            assert time.monotonic() < deadline, proc.log_tail()
            time.sleep(0.1)


def _scheduled(pod: RunningPod) -> set[int]:
    """The container's threads once all of them are in the background class."""
    found = tids(pod)
    for tid in found:
        try:
            if (policy_of(tid), nice_of(tid), ionice_of(tid)) != ("SCHED_IDLE", 10, "idle"):
                return set()
        except (OSError, subprocess.CalledProcessError):
            return set()  # a thread that exited meanwhile: read again
    return found


def test_scheduling_class_on_every_task_and_on_tasks_started_later(
    setup, kubelet: KubeletEmulator
) -> None:
    proc = setup[0]
    pod = kubelet.run_pod(
        classy("quiet", **{"schedulingclass.resource-enforcer.dev/container.app": "background"})
    )
    deadline = time.monotonic() + 30
    while not (first := _scheduled(pod)):
        assert time.monotonic() < deadline, proc.log_tail()
        time.sleep(0.1)
    # A process an exec starts later does not inherit the class; the sweep gives it.
    kubelet.exec_sync(pod.container_id("app"), ["sh", "-c", "sleep 600 >/dev/null 2>&1 &"])
    deadline = time.monotonic() + 30
    while len(_scheduled(pod) - first) < 1:
        assert time.monotonic() < deadline, proc.log_tail()
        time.sleep(0.2)


@pytest.mark.parametrize(
    ("namespace", "annotations", "code", "needle"),
    [
        (
            "e2e",
            {"schedulingclass.resource-enforcer.dev/pod": "realtime"},
            grpc.StatusCode.PERMISSION_DENIED,
            'namespace "e2e" may not use scheduling class "realtime"',
        ),
        (
            "e2e",
            {"schedulingclass.resource-enforcer.dev/container.app": "turbo"},
            grpc.StatusCode.INVALID_ARGUMENT,
            '"turbo" is not configured',
        ),
        (  # once INTERNAL (relay) or UNKNOWN (NRI): RecursionError in the YAML parser
            "e2e",
            {"resource-enforcer.dev/affinity": "app: " + "[" * 3000 + "]" * 3000},
            grpc.StatusCode.INVALID_ARGUMENT,
            "app.0.0.0.0.0.0.0... (8 levels more): nested more than 16 levels deep",
        ),
        (
            "e2e",
            {"rdtclass.resource-enforcer.dev/pod": "platinum"},
            grpc.StatusCode.INVALID_ARGUMENT,
            '"platinum" is not configured',
        ),
        (
            "e2e",
            {"rdtclass.resource-enforcer.dev/pod": ".."},
            grpc.StatusCode.INVALID_ARGUMENT,
            "is malformed",
        ),
        (
            "e2e",
            {"blockioclass.resource-enforcer.dev/container.app": "../../etc"},
            grpc.StatusCode.INVALID_ARGUMENT,
            "is malformed",
        ),
        (
            "e2e",
            {"rdtclass.resource-enforcer.dev/pod": "a/b"},
            grpc.StatusCode.INVALID_ARGUMENT,
            "is malformed",
        ),
        (
            "dev",
            {"rdtclass.resource-policy.nri.io/pod": "gold"},
            grpc.StatusCode.PERMISSION_DENIED,
            'namespace "dev" may not use rdt class "gold"',
        ),
    ],
)
def test_refusals(
    kubelet: KubeletEmulator, namespace: str, annotations: dict, code: grpc.StatusCode, needle: str
) -> None:
    with pytest.raises(grpc.RpcError) as err:
        kubelet.run_pod(classy("refused", namespace, **annotations))
    assert err.value.code() == code
    assert needle in err.value.details() and next(iter(annotations)) in err.value.details()


def test_rdt_class_asked_for_while_rdt_is_unavailable(
    containerd: PrivateContainerd, tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(config_text("50M"))
    proc = EnforcerProcess(
        tmp_path / "enforcer",
        runtime_socket=containerd.socket,
        config=str(config),
        extra_args=["--resctrl-root", str(tmp_path / "no-resctrl")],
    )
    proc.start()
    try:
        with KubeletEmulator(proc.relay_socket, log_root=tmp_path / "pods") as kubelet:
            with pytest.raises(grpc.RpcError) as err:
                kubelet.run_pod(classy("no-rdt", **{"rdtclass.resource-enforcer.dev/pod": "gold"}))
            assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert 'RDT class "gold" cannot be applied' in err.value.details()
            # Without an explicit request, pods run (no QoS-named class is configured).
            kubelet.run_pod(classy("plain"))
    finally:
        assert proc.stop() == 0, proc.log_tail()


def test_status_shows_the_classes(setup, kubelet: KubeletEmulator) -> None:
    proc = setup[0]
    kubelet.run_pod(
        classy(
            "both",
            **{
                "rdtclass.resource-enforcer.dev/pod": "silver",
                "blockioclass.resource-enforcer.dev/pod": "throttled",
            },
        )
    )
    out = proc.run_cli("status", "--state-dir", proc.state_dir)
    row = next(line for line in out.stdout.splitlines() if " both " in f" {line} ")
    assert "silver" in row and "throttled" in row


def test_sighup_reloads_a_change_the_file_watch_cannot_see(setup, kubelet: KubeletEmulator) -> None:
    proc, _, config = setup
    pod = kubelet.run_pod(
        classy("hup", **{"blockioclass.resource-enforcer.dev/container.app": "throttled"})
    )
    assert blkio(pod, "read_bps") == f"{DISK_KEY} 50000000\n"
    # Same size, same inode, same modification time: only SIGHUP says it changed.
    before = config.stat()
    changed = config_text("40M")
    assert len(changed) == len(config_text("50M"))
    with open(config, "r+") as f:
        f.write(changed)
    os.utime(config, ns=(before.st_atime_ns, before.st_mtime_ns))
    time.sleep(2.5)  # the watch looks every second: it must not have noticed
    assert blkio(pod, "read_bps") == f"{DISK_KEY} 50000000\n"
    try:
        assert proc.proc is not None
        proc.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 15
        while blkio(pod, "read_bps") != f"{DISK_KEY} 40000000\n":
            assert time.monotonic() < deadline, proc.log_tail()
            time.sleep(0.1)
    finally:
        config.write_text(config_text("50M"))
        deadline = time.monotonic() + 15
        while blkio(pod, "read_bps") != f"{DISK_KEY} 50000000\n":
            assert time.monotonic() < deadline, proc.log_tail()
            time.sleep(0.1)
