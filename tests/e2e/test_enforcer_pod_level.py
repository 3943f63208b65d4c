"""A pod Guaranteed by its pod-level resources (`spec.resources`), end to end: the webhook's
annotation (the contract's code, as the API server stores the pod), the kubelet emulator
(the cgroup parent of Kubernetes' QoS class, each container without limits given the pod's),
the relay (console script) and a private containerd, static policy on this machine with its
first CPU reserved. Every assertion reads the real cgroup files.

Kubernetes classes the pod Guaranteed; kubelet's static policy gives no container of such a
pod exclusive CPUs. So its containers run on the shared CPUs, under the pod's limits, with the
`Guaranteed` block-I/O class (the QoS-named default), and a Guaranteed pod without pod-level
resources still gets a CPU of its own beside them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from enforcer.configuration import parse_config
from enforcer.topology import CPUSet
from resource_contract.keys import RESOURCES_KEY
from resource_contract.pod_annotation import Policy, build_annotation
from tests.support.cgroupfs import node_cpus
from tests.support.containerd import PrivateContainerd
from tests.support.disks import whole_disk
from tests.support.enforcer_process import EnforcerProcess
from tests.support.kubelet import KubeletEmulator, RunningPod
from tests.support.pods import guaranteed, manifest, sleeper

pytestmark = pytest.mark.containerd

ALL = node_cpus()
RESERVED = CPUSet.of(min(ALL))
BUDGET = {"cpu": "1", "memory": "64Mi"}


def _disk() -> tuple[str, str]:
    found = whole_disk()
    if found is None:
        pytest.fail("no whole-disk block device (/dev/vda, /dev/sda, ...) on this machine")
    path, major, minor = found
    return path, f"{major}:{minor}"


DISK, DISK_KEY = _disk()
CONFIG = f"""\
policy: {{name: static, reservedCPUs: "{RESERVED}"}}
blockio:
  Classes:
    Guaranteed:
      - Devices: ["{DISK}"]
        ThrottleReadBps: 40M
    Burstable:
      - Devices: ["{DISK}"]
        ThrottleReadBps: 20M
    BestEffort:
      - Devices: ["{DISK}"]
        ThrottleReadBps: 10M
"""


@pytest.fixture(scope="module")
def enforcer(
    containerd: PrivateContainerd, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EnforcerProcess]:
    workdir = tmp_path_factory.mktemp("pod-level")
    config = workdir / "config.yaml"
    config.write_text(CONFIG)
    proc = EnforcerProcess(
        workdir / "enforcer", runtime_socket=containerd.socket, config=str(config)
    )
    proc.start()
    try:
        yield proc
    finally:
        assert proc.stop() == 0, proc.log_tail()


@pytest.fixture
def kubelet(enforcer: EnforcerProcess, tmp_path: Path) -> Iterator[KubeletEmulator]:
    with KubeletEmulator(enforcer.relay_socket, log_root=tmp_path / "pods") as emu:
        yield emu


def admitted(pod: dict) -> dict:
    """The pod as the API server stores it after the webhook mutated it."""
    policy = Policy.from_config(parse_config(yaml.safe_load(CONFIG)))
    value = build_annotation(pod, namespace=pod["metadata"]["namespace"], policy=policy)
    pod["metadata"].setdefault("annotations", {})[RESOURCES_KEY] = value
    return pod


def budget_pod(name: str, *containers: str) -> dict:
    pod = manifest(name, *(sleeper(c) for c in containers))
    pod["spec"]["resources"] = {"requests": dict(BUDGET), "limits": dict(BUDGET)}
    return pod


def cgroup_file(pod: RunningPod, controller: str, container: str, name: str) -> str:
    return Path(pod.cgroup_path(controller, container), name).read_text().strip()


def cpus_of(pod: RunningPod, container: str) -> CPUSet:
    return CPUSet.parse(cgroup_file(pod, "cpuset", container, "cpuset.cpus"))


def test_a_pod_guaranteed_by_its_pod_level_resources_is_placed_as_kubernetes_classes_it(
    kubelet: KubeletEmulator,
) -> None:
    pod = kubelet.run_pod(admitted(budget_pod("budget", "app", "sidecar")))
    # kubelet's cgroup parent for a Guaranteed pod (not besteffort/, as the containers alone).
    assert pod.qos == "Guaranteed" and pod.cgroup_parent == f"/kubepods/pod{pod.uid}"
    for c in ("app", "sidecar"):
        # No CPU of its own: the shared CPUs, all of them while nobody holds one.
        assert cpus_of(pod, c) == ALL
        # The pod's limits, as kubelet gives a container without limits of its own.
        assert cgroup_file(pod, "cpu", c, "cpu.cfs_quota_us") == "100000"
        assert int(cgroup_file(pod, "memory", c, "memory.limit_in_bytes")) == 64 << 20
        # The Guaranteed block-I/O class (QoS-named default), on the real disk.
        assert cgroup_file(pod, "blkio", c, "blkio.throttle.read_bps_device") == (
            f"{DISK_KEY} 40000000"
        )
    # A Guaranteed pod without pod-level resources gets a CPU of its own; the budget pod's
    # containers, on the shared CPUs, move off it.
    plain = kubelet.run_pod(admitted(manifest("plain", sleeper(resources=guaranteed("1")))))
    own = cpus_of(plain, "app")
    assert len(own) == 1 and not own & RESERVED
    for c in ("app", "sidecar"):
        assert cpus_of(pod, c) == ALL - own
    kubelet.remove_pod(plain)
    for c in ("app", "sidecar"):
        assert cpus_of(pod, c) == ALL


def test_without_the_annotation_the_pod_still_runs(kubelet: KubeletEmulator) -> None:
    """The CRI fallback: no annotation, so the pod's budget is not known; the container is
    decoded from kubelet's values (the pod's limits) and its cgroup parent, and runs."""
    pod = kubelet.run_pod(budget_pod("bare", "app"))
    assert pod.cgroup_parent == f"/kubepods/pod{pod.uid}"
    assert cpus_of(pod, "app") <= ALL
    assert int(cgroup_file(pod, "memory", "app", "memory.limit_in_bytes")) == 64 << 20
    assert cgroup_file(pod, "blkio", "app", "blkio.throttle.read_bps_device") == (
        f"{DISK_KEY} 40000000"
    )
