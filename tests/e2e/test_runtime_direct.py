"""End to end, no relay: the kubelet emulator drives the private containerd directly, and the
real cgroup files show what kubelet asked for. This is the baseline the relay tests build on."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from enforcer.cri import api_pb2
from tests.support.containerd import PrivateContainerd
from tests.support.images import BUSYBOX_IMAGE, PAUSE_IMAGE
from tests.support.kubelet import KubeletEmulator, RunningPod
from tests.support.pods import manifest, sleeper

pytestmark = pytest.mark.containerd

CGROUP = "/sys/fs/cgroup"
UNLIMITED_MEMORY = 9223372036854771712  # memory.limit_in_bytes of an unlimited v1 cgroup


# Not the relay: the emulator against the system's containerd only (tests/e2e/conftest.py runs
# the relay's modules on 1.7 too).
@pytest.fixture(scope="session")
def containerd(containerd16: PrivateContainerd) -> PrivateContainerd:
    return containerd16


@pytest.fixture
def kubelet(containerd: PrivateContainerd, tmp_path: Path) -> Iterator[KubeletEmulator]:
    # close() removes every pod the emulator started, also when the test failed.
    with KubeletEmulator(containerd.socket, log_root=tmp_path / "pods") as emu:
        yield emu


def read(pod: RunningPod, controller: str, file: str, container: str = "app") -> str:
    return Path(pod.cgroup_path(controller, container), file).read_text().strip()


def test_runtime_version_and_images(containerd: PrivateContainerd, kubelet: KubeletEmulator):
    v = kubelet.version()
    assert v.runtime_name == "containerd"
    assert v.runtime_api_version == "v1"
    names = {
        tag
        for img in kubelet.images.ListImages(api_pb2.ListImagesRequest()).images
        for tag in img.repo_tags
    }
    assert {BUSYBOX_IMAGE, PAUSE_IMAGE} <= names
    assert containerd.snapshotter in ("overlayfs", "native")


def test_best_effort_pod(kubelet: KubeletEmulator):
    pod = kubelet.run_pod(manifest("besteffort", sleeper()))
    assert pod.qos == "BestEffort"
    assert pod.cgroup_parent == f"/kubepods/besteffort/pod{pod.uid}"
    status = kubelet.container_status(pod.containers["app"])
    assert status.state == api_pb2.CONTAINER_RUNNING
    assert status.labels["io.kubernetes.pod.uid"] == pod.uid

    assert read(pod, "cpu", "cpu.shares") == "2"
    assert read(pod, "cpu", "cpu.cfs_quota_us") == "-1"
    assert int(read(pod, "memory", "memory.limit_in_bytes")) == UNLIMITED_MEMORY

    out = kubelet.exec_sync(pod.containers["app"], ["sh", "-c", "echo hello; cat /proc/1/cmdline"])
    assert out.exit_code == 0
    assert out.stdout.startswith(b"hello\nsleep\x003600")

    pod_dirs = [Path(CGROUP, c, pod.cgroup_parent.lstrip("/")) for c in ("cpu", "memory")]
    assert all(d.is_dir() for d in pod_dirs)
    kubelet.remove_pod(pod)
    assert not any(d.exists() for d in pod_dirs)
    assert not kubelet.list_containers(pod.sandbox_id)
    assert pod.sandbox_id not in {s.id for s in kubelet.list_pod_sandboxes()}


def test_guaranteed_one_cpu_pod(kubelet: KubeletEmulator):
    annotations = {"resource-enforcer.dev/resources": '{"containers": {}}'}
    pod = kubelet.run_pod(
        manifest(
            "guaranteed",
            sleeper(resources={"limits": {"cpu": "1", "memory": "64Mi"}}),
            annotations=annotations,
        )
    )
    assert pod.qos == "Guaranteed"
    assert pod.cgroup_parent == f"/kubepods/pod{pod.uid}"
    container_dir = pod.cgroup_path("cpu", "app")
    assert container_dir == f"{CGROUP}/cpu/kubepods/pod{pod.uid}/{pod.containers['app']}"

    assert read(pod, "cpu", "cpu.shares") == "1024"
    assert read(pod, "cpu", "cpu.cfs_period_us") == "100000"
    assert read(pod, "cpu", "cpu.cfs_quota_us") == "100000"
    assert read(pod, "memory", "memory.limit_in_bytes") == str(64 << 20)
    # The container's processes really are in that cgroup.
    pids = Path(container_dir, "cgroup.procs").read_text().split()
    assert pids

    # Pod annotations reach the runtime through the sandbox config.
    sb = kubelet.runtime.PodSandboxStatus(
        api_pb2.PodSandboxStatusRequest(pod_sandbox_id=pod.sandbox_id)
    ).status
    assert dict(sb.annotations) == annotations
    assert sb.linux.namespaces.options.network == api_pb2.NODE

    out = kubelet.exec_sync(pod.containers["app"], ["cat", "/sys/fs/cgroup/cpu/cpu.shares"])
    assert out.exit_code == 0, out.stderr

    kubelet.remove_pod(pod)
    assert not Path(container_dir).exists()
    assert not Path(CGROUP, "cpu", pod.cgroup_parent.lstrip("/")).exists()


def test_burstable_pod_with_init_container(kubelet: KubeletEmulator):
    init = {"name": "setup", "image": BUSYBOX_IMAGE, "command": ["sh", "-c", "exit 0"]}
    app = sleeper(
        resources={
            "requests": {"cpu": "250m", "memory": "32Mi"},
            "limits": {"cpu": "500m", "memory": "128Mi"},
        }
    )
    pod = kubelet.run_pod(manifest("burstable", app, init=[init]))
    assert pod.qos == "Burstable"
    assert pod.cgroup_parent == f"/kubepods/burstable/pod{pod.uid}"
    init_status = kubelet.container_status(pod.init_containers["setup"])
    assert init_status.state == api_pb2.CONTAINER_EXITED and init_status.exit_code == 0

    assert read(pod, "cpu", "cpu.shares") == "256"
    assert read(pod, "cpu", "cpu.cfs_quota_us") == "50000"
    assert read(pod, "memory", "memory.limit_in_bytes") == str(128 << 20)


def test_update_container_resources(kubelet: KubeletEmulator):
    pod = kubelet.run_pod(manifest("update", sleeper(resources={"requests": {"cpu": "100m"}})))
    cid = pod.containers["app"]
    cpu = sorted(os.sched_getaffinity(0))[0]
    kubelet.update_container_resources(
        cid, {"cpu_shares": 512, "cpu_period": 100000, "cpuset_cpus": str(cpu)}
    )
    assert read(pod, "cpuset", "cpuset.cpus") == str(cpu)
    assert read(pod, "cpu", "cpu.shares") == "512"
    out = kubelet.exec_sync(cid, ["sh", "-c", "grep Cpus_allowed_list /proc/self/status"])
    assert out.stdout.split()[-1].decode() == str(cpu)
    assert kubelet.container_status(cid).resources.linux.cpuset_cpus == str(cpu)


def test_create_container_error_propagates(kubelet: KubeletEmulator):
    bad = {"name": "app", "image": "docker.io/library/does-not-exist:local", "command": ["true"]}
    before = {s.id for s in kubelet.list_pod_sandboxes()}
    with pytest.raises(grpc.RpcError) as err:
        kubelet.run_pod(manifest("bad-image", bad))
    assert err.value.code() != grpc.StatusCode.OK
    # run_pod removed the half-made pod again.
    assert {s.id for s in kubelet.list_pod_sandboxes()} == before


def test_containers_survive_containerd_restart(
    containerd: PrivateContainerd, kubelet: KubeletEmulator
):
    pod = kubelet.run_pod(manifest("restart", sleeper()))
    cid = pod.containers["app"]
    old_pid = containerd.pid
    containerd.restart()
    assert containerd.pid != old_pid
    assert kubelet.container_status(cid).state == api_pb2.CONTAINER_RUNNING
    assert kubelet.exec_sync(cid, ["true"]).exit_code == 0
