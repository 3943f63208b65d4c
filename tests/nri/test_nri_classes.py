"""Classes and annotations through the NRI plugin on a real containerd 1.7: RDT (resctrl faked
in a folder, so the plugin applies the class itself, as the relay does) and block I/O (this
machine's real disk and cgroup v1 blkio files, applied by the plugin: containerd has no
block-I/O classes of its own), the same refusals as the relay, and a spoofed resources
annotation that is not trusted."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from enforcer.topology import CPUSet
from tests.support.cgroupfs import node_cpus, thread_ids, throttle
from tests.support.disks import whole_disk
from tests.support.fake_resctrl import FakeResctrl, ResctrlShape
from tests.support.kubelet import KubeletEmulator, RunningPod
from tests.support.nri_enforcer import NriEnforcerProcess
from tests.support.pods import guaranteed, manifest, sleeper
from tests.support.runtimes import NriContainerd

ALL = node_cpus()
RESERVED = CPUSet.of(min(ALL))


def _disk() -> tuple[str, str]:
    found = whole_disk()
    if found is None:
        pytest.fail("no whole-disk block device (/dev/vda, /dev/sda, ...) on this machine")
    path, major, minor = found
    return path, f"{major}:{minor}"


DISK, DISK_KEY = _disk()
CONFIG = f"""\
policy: {{name: static, reservedCPUs: "{RESERVED}"}}
rdt:
  partitions:
    shared:
      l3Allocation: "100%"
      classes:
        gold: {{l3Allocation: "60%"}}
blockio:
  Classes:
    throttled:
      - Devices: ["{DISK}"]
        ThrottleReadBps: 50M
classAccess:
  rdt: {{gold: ["nri-cls"]}}
"""


@pytest.fixture(scope="module")
def setup(
    nri_containerd: NriContainerd, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[NriEnforcerProcess, FakeResctrl]]:
    workdir = tmp_path_factory.mktemp("nri-classes")
    resctrl = FakeResctrl(workdir / "resctrl", ResctrlShape())
    config = workdir / "config.yaml"
    config.write_text(CONFIG)
    proc = NriEnforcerProcess(
        workdir / "enforcer",
        nri_socket=nri_containerd.nri_socket,
        config=str(config),
        extra_args=["--resctrl-root", str(resctrl.root)],
    )
    proc.start()
    proc.config_path = config  # type: ignore[attr-defined]
    try:
        yield proc, resctrl
    finally:
        assert proc.stop() == 0, proc.log_tail()


@pytest.fixture
def kubelet(nri_containerd: NriContainerd, setup, tmp_path: Path) -> Iterator[KubeletEmulator]:
    with KubeletEmulator(nri_containerd.socket, log_root=tmp_path / "pods") as emu:
        yield emu


def classy(name: str, namespace: str = "nri-cls", **annotations: str) -> dict:
    return manifest(name, sleeper(), namespace=namespace, annotations=annotations)


def tids(pod: RunningPod) -> set[int]:
    return thread_ids(pod.cgroup_path("cpuset", "app"))


def test_rdt_class_holds_the_containers_processes(setup, kubelet: KubeletEmulator) -> None:
    proc, resctrl = setup
    pod = kubelet.run_pod(classy("cached", **{"rdtclass.resource-enforcer.dev/pod": "gold"}))
    group = resctrl.root / "gold"
    assert tids(pod), proc.log_tail()
    assert tids(pod) <= {int(t) for t in (group / "tasks").read_text().split()}, proc.log_tail()
    assert (group / "schemata").read_text().strip() == "L3:0=7f;1=7f"
    kubelet.remove_pod(pod)


def test_blockio_class_writes_the_real_disks_throttles(setup, kubelet: KubeletEmulator) -> None:
    pod = kubelet.run_pod(
        classy("throttled", **{"blockioclass.resource-enforcer.dev/container.app": "throttled"})
    )
    read_bps = throttle(pod.cgroup_path("blkio", "app"), "read_bps")
    assert read_bps == f"{DISK_KEY} 50000000\n", setup[0].log_tail()
    kubelet.remove_pod(pod)


@pytest.mark.parametrize(
    ("namespace", "annotations", "code", "needle"),
    [
        (  # once INTERNAL (relay) or UNKNOWN (NRI): RecursionError in the YAML parser
            "nri-cls",
            {"resource-enforcer.dev/affinity": "app: " + "[" * 3000 + "]" * 3000},
            grpc.StatusCode.INVALID_ARGUMENT,
            "app.0.0.0.0.0.0.0... (8 levels more): nested more than 16 levels deep",
        ),
        (
            "nri-cls",
            {"rdtclass.resource-enforcer.dev/pod": "platinum"},
            grpc.StatusCode.INVALID_ARGUMENT,
            '"platinum" is not configured',
        ),
        (
            "nri-cls",
            {"blockioclass.resource-enforcer.dev/container.app": "../../etc"},
            grpc.StatusCode.INVALID_ARGUMENT,
            "is malformed",
        ),
        (
            "nri-dev",
            {"rdtclass.resource-policy.nri.io/pod": "gold"},
            grpc.StatusCode.PERMISSION_DENIED,
            'namespace "nri-dev" may not use rdt class "gold"',
        ),
    ],
)
def test_refusals_carry_the_relays_codes_and_messages(
    setup,
    kubelet: KubeletEmulator,
    nri_containerd: NriContainerd,
    namespace: str,
    annotations: dict,
    code,
    needle: str,
) -> None:
    with pytest.raises(grpc.RpcError) as refused:
        kubelet.run_pod(classy("refused", namespace=namespace, **annotations))
    assert refused.value.code() == code, refused.value.details()
    assert needle in refused.value.details()
    if not nri_containerd.release.crio:  # CRI-O hands on the plugin's message as it is
        assert "failed to get NRI adjustment" in refused.value.details()


def test_a_spoofed_resources_annotation_is_not_trusted(setup, kubelet: KubeletEmulator) -> None:
    # A BestEffort pod whose author wrote the webhook's annotation claiming 1 exclusive CPU:
    # kubelet's CRI values say otherwise, so it stays on the shared pool.
    spoof = (
        '{"containers": {"app": {"requests": {"cpu": "1", "memory": "64Mi"}, '
        '"limits": {"cpu": "1", "memory": "64Mi"}}}, "initContainers": {}}'
    )
    pod = kubelet.run_pod(classy("spoof", **{"resource-enforcer.dev/resources": spoof}))
    cpus = CPUSet.parse(Path(pod.cgroup_path("cpuset", "app"), "cpuset.cpus").read_text())
    assert cpus == ALL
    # The exclusive CPU is still there for a real Guaranteed pod.
    real = kubelet.run_pod(
        manifest("real", sleeper(resources=guaranteed("1")), namespace="nri-cls")
    )
    taken = CPUSet.parse(Path(real.cgroup_path("cpuset", "app"), "cpuset.cpus").read_text())
    assert len(taken) == 1 and not taken & RESERVED
    assert "spoof" in setup[0].log_tail(200)
    kubelet.remove_pod(real)
    kubelet.remove_pod(pod)


def test_changed_class_definitions_reach_running_containers(
    setup, kubelet: KubeletEmulator
) -> None:
    """Live configuration works as in relay mode: a new throttle reaches a running container,
    a refused file keeps the last good configuration."""
    proc, _ = setup
    config = proc.config_path
    pod = kubelet.run_pod(
        classy("live", **{"blockioclass.resource-enforcer.dev/container.app": "throttled"})
    )
    folder = pod.cgroup_path("blkio", "app")

    def read_bps() -> str:
        return throttle(folder, "read_bps")

    assert read_bps() == f"{DISK_KEY} 50000000\n"

    def until(predicate) -> None:
        deadline = time.monotonic() + 15
        while not predicate():
            assert time.monotonic() < deadline, proc.log_tail()
            time.sleep(0.1)

    try:
        config.write_text(CONFIG.replace("50M", "20M"))
        until(lambda: read_bps() == f"{DISK_KEY} 20000000\n")
        config.write_text(CONFIG.replace("50M", "20M") + "bogus: 1\n")
        until(lambda: "bogus: Extra inputs are not permitted" in proc.log_tail(400))
        assert read_bps() == f"{DISK_KEY} 20000000\n"
    finally:
        config.write_text(CONFIG)
        until(lambda: read_bps() == f"{DISK_KEY} 50000000\n")
    kubelet.remove_pod(pod)
