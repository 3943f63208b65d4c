"""The kubelet emulator's derivations (QoS class, resources, cgroup parents, configs): fast unit
tests, no runtime needed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from enforcer.cri import api_pb2
from enforcer.decode.kubelet import milli_cpu_to_quota, milli_cpu_to_shares
from tests.support import kubelet as k
from tests.support import kubelet_sends as ks

UID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
GiB = 1 << 30
MiB = 1 << 20


def pod(*containers: dict[str, Any], init: list[dict[str, Any]] | None = None, **meta: Any):
    spec: dict[str, Any] = {"containers": list(containers)}
    if init:
        spec["initContainers"] = init
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns", "uid": UID, **meta},
        "spec": spec,
    }


def ctr(name: str = "app", requests: dict | None = None, limits: dict | None = None):
    c: dict[str, Any] = {"name": name, "image": "docker.io/library/busybox:local"}
    if requests is not None or limits is not None:
        c["resources"] = {}
        if requests is not None:
            c["resources"]["requests"] = requests
        if limits is not None:
            c["resources"]["limits"] = limits
    return c


# -- QoS class ------------------------------------------------------------------------------

QOS_CASES = [
    ("no resources", pod(ctr()), ks.BEST_EFFORT),
    ("empty resources", pod({"name": "a", "image": "x", "resources": {}}), ks.BEST_EFFORT),
    ("zero requests", pod(ctr(requests={"cpu": "0", "memory": "0"})), ks.BEST_EFFORT),
    ("only non-QoS resources", pod(ctr(limits={"ephemeral-storage": "1Gi"})), ks.BEST_EFFORT),
    ("limits only (requests default)", pod(ctr(limits={"cpu": "1", "memory": "1Gi"})),
     ks.GUARANTEED),
    ("requests == limits", pod(ctr(requests={"cpu": "500m", "memory": "64Mi"},
                                   limits={"cpu": "0.5", "memory": "64Mi"})), ks.GUARANTEED),
    ("requests < limits", pod(ctr(requests={"cpu": "250m", "memory": "64Mi"},
                                  limits={"cpu": "1", "memory": "64Mi"})), ks.BURSTABLE),
    ("cpu request only", pod(ctr(requests={"cpu": "100m"})), ks.BURSTABLE),
    ("memory request only", pod(ctr(requests={"memory": "1Gi"})), ks.BURSTABLE),
    ("cpu limit only", pod(ctr(limits={"cpu": "1"})), ks.BURSTABLE),
    ("one of two containers best-effort",
     pod(ctr("a", limits={"cpu": "1", "memory": "1Gi"}), ctr("b")), ks.BURSTABLE),
    ("two guaranteed containers",
     pod(ctr("a", limits={"cpu": "1", "memory": "1Gi"}),
         ctr("b", limits={"cpu": "2", "memory": "2Gi"})), ks.GUARANTEED),
    ("best-effort init container spoils Guaranteed",
     pod(ctr(limits={"cpu": "1", "memory": "1Gi"}), init=[ctr("init")]), ks.BURSTABLE),
    ("guaranteed init container",
     pod(ctr(limits={"cpu": "1", "memory": "1Gi"}),
         init=[ctr("init", limits={"cpu": "2", "memory": "64Mi"})]), ks.GUARANTEED),
    ("burstable init in best-effort pod",
     pod(ctr(), init=[ctr("init", requests={"cpu": "10m"})]), ks.BURSTABLE),
]  # fmt: skip


@pytest.mark.parametrize(
    ("manifest", "qos"), [c[1:] for c in QOS_CASES], ids=[c[0] for c in QOS_CASES]
)
def test_qos_class(manifest: dict, qos: str) -> None:
    assert ks.pod_qos_class(manifest) == qos


# -- resource math --------------------------------------------------------------------------

# (requests, limits) -> (cpu_shares, cpu_quota, memory_limit_in_bytes)
RESOURCE_CASES = [
    (None, None, 2, 0, 0),
    ({"cpu": "1"}, None, 1024, 0, 0),
    ({"cpu": "100m"}, None, 102, 0, 0),
    ({"cpu": "1m"}, None, 2, 0, 0),  # at least 2 shares
    ({"cpu": "0.0001"}, None, 2, 0, 0),  # rounds up to 1m like MilliValue()
    (None, {"cpu": "2", "memory": "1Gi"}, 2048, 200_000, GiB),  # request defaults to limit
    ({"cpu": "250m"}, {"cpu": "1"}, 256, 100_000, 0),
    ({"cpu": "1500m"}, {"cpu": "1500m"}, 1536, 150_000, 0),
    (None, {"cpu": "5m"}, 5, 1000, 0),  # quota at least 1000
    (None, {"cpu": "10m"}, 10, 1000, 0),
    (None, {"cpu": "11m"}, 11, 1100, 0),
    ({"memory": "64Mi"}, {"memory": "128Mi"}, 2, 0, 128 * MiB),
    ({"memory": "1G"}, {"memory": "1G"}, 2, 0, 1_000_000_000),
]


@pytest.mark.parametrize(("requests", "limits", "shares", "quota", "memory"), RESOURCE_CASES)
def test_linux_resources(requests, limits, shares, quota, memory) -> None:
    res = ks.linux_resources(ctr(requests=requests, limits=limits))
    assert res.cpu_period == 100_000
    assert res.cpu_shares == shares
    assert res.cpu_quota == quota
    assert res.memory_limit_in_bytes == memory
    assert res.cpuset_cpus == ""  # kubelet with CPU manager "none" never pins


def test_shares_and_quota_helpers() -> None:
    assert milli_cpu_to_shares(0) == 2
    assert milli_cpu_to_shares(1000) == 1024
    assert milli_cpu_to_shares(4000) == 4096
    assert milli_cpu_to_quota(0) == 0
    assert milli_cpu_to_quota(1) == 1000
    assert milli_cpu_to_quota(2500) == 250_000


def test_oom_score_adj() -> None:
    cap = 16 * GiB
    assert ks.oom_score_adj(ks.GUARANTEED, ctr(), cap) == -997
    assert ks.oom_score_adj(ks.BEST_EFFORT, ctr(), cap) == 1000
    assert ks.oom_score_adj(ks.BURSTABLE, ctr(requests={"memory": "4Gi"}), cap) == 750
    assert ks.oom_score_adj(ks.BURSTABLE, ctr(requests={"cpu": "1"}), cap) == 999
    assert ks.oom_score_adj(ks.BURSTABLE, ctr(requests={"memory": "16Gi"}), cap) == 3


# -- cgroups -----------------------------------------------------------------------------------


def test_cgroup_parent_cgroupfs() -> None:
    assert ks.cgroup_parent_for(ks.GUARANTEED, UID) == f"/kubepods/pod{UID}"
    assert ks.cgroup_parent_for(ks.BURSTABLE, UID) == f"/kubepods/burstable/pod{UID}"
    assert ks.cgroup_parent_for(ks.BEST_EFFORT, UID) == f"/kubepods/besteffort/pod{UID}"


def test_cgroup_parent_systemd() -> None:
    u = UID.replace("-", "_")
    assert ks.cgroup_parent_for(ks.GUARANTEED, UID, "systemd") == f"kubepods-pod{u}.slice"
    assert ks.cgroup_parent_for(ks.BURSTABLE, UID, "systemd") == f"kubepods-burstable-pod{u}.slice"
    assert (
        ks.cgroup_parent_for(ks.BEST_EFFORT, UID, "systemd") == f"kubepods-besteffort-pod{u}.slice"
    )
    with pytest.raises(ValueError):
        ks.cgroup_parent_for(ks.BURSTABLE, UID, "nope")


def test_cgroup_path() -> None:
    parent = f"/kubepods/burstable/pod{UID}"
    assert (
        k.cgroup_path("cpuset", parent, "abc")
        == f"/sys/fs/cgroup/cpuset/kubepods/burstable/pod{UID}/abc"
    )
    assert k.cgroup_path("memory", parent, "abc", "/tmp/cg") == (
        f"/tmp/cg/memory/kubepods/burstable/pod{UID}/abc"
    )
    assert k.cgroup_path(None, parent, "abc") == f"/sys/fs/cgroup/kubepods/burstable/pod{UID}/abc"
    assert k.cgroup_path("cpu", "kubepods-burstable-pod1_2.slice", "abc") == (
        "/sys/fs/cgroup/cpu/kubepods.slice/kubepods-burstable.slice/"
        "kubepods-burstable-pod1_2.slice/cri-containerd-abc.scope"
    )


# -- configs -------------------------------------------------------------------------------------


@pytest.fixture
def emulator(tmp_path) -> Iterator[k.KubeletEmulator]:
    # No runtime behind the socket: the channel connects lazily and we make no calls.
    emu = k.KubeletEmulator(
        str(tmp_path / "none.sock"), log_root=tmp_path / "logs", memory_capacity=16 * GiB
    )
    yield emu
    emu.close()


def test_sandbox_config(emulator: k.KubeletEmulator, tmp_path) -> None:
    manifest = pod(
        ctr(requests={"cpu": "100m"}),
        labels={"app": "web"},
        annotations={"resource-enforcer.dev/resources": "{}", "x": "y"},
    )
    cfg = emulator.sandbox_config(manifest)
    assert cfg.metadata == api_pb2.PodSandboxMetadata(name="p", uid=UID, namespace="ns")
    assert dict(cfg.annotations) == {"resource-enforcer.dev/resources": "{}", "x": "y"}
    assert dict(cfg.labels) == {
        "app": "web",
        "io.kubernetes.pod.name": "p",
        "io.kubernetes.pod.namespace": "ns",
        "io.kubernetes.pod.uid": UID,
    }
    assert cfg.linux.cgroup_parent == f"/kubepods/burstable/pod{UID}"
    assert cfg.linux.security_context.namespace_options.network == api_pb2.NODE
    assert cfg.log_directory == str(tmp_path / "logs" / f"ns_p_{UID}")


def test_sandbox_config_generates_uid(emulator: k.KubeletEmulator) -> None:
    manifest = pod(ctr())
    del manifest["metadata"]["uid"]
    a, b = emulator.sandbox_config(manifest), emulator.sandbox_config(manifest)
    assert a.metadata.uid and a.metadata.uid != b.metadata.uid
    assert a.linux.cgroup_parent == f"/kubepods/besteffort/pod{a.metadata.uid}"


def test_container_config(emulator: k.KubeletEmulator) -> None:
    c = ctr(limits={"cpu": "1", "memory": "64Mi"})
    c.update(command=["sleep"], args=["3600"], env=[{"name": "A", "value": "1"}])
    manifest = pod(c, annotations={"pod-only": "yes"})
    cfg = emulator.container_config(manifest, c, UID)
    assert cfg.metadata.name == "app"
    assert cfg.image.image == "docker.io/library/busybox:local"
    assert list(cfg.command) == ["sleep"] and list(cfg.args) == ["3600"]
    assert [(e.key, e.value) for e in cfg.envs] == [("A", "1")]
    assert dict(cfg.labels) == {
        "io.kubernetes.container.name": "app",
        "io.kubernetes.pod.name": "p",
        "io.kubernetes.pod.namespace": "ns",
        "io.kubernetes.pod.uid": UID,
    }
    assert "pod-only" not in cfg.annotations  # pod annotations stay in the sandbox config
    res = cfg.linux.resources
    assert (res.cpu_shares, res.cpu_quota, res.cpu_period) == (1024, 100_000, 100_000)
    assert res.memory_limit_in_bytes == 64 * MiB
    assert res.oom_score_adj == -997
    assert cfg.log_path == "app/0.log"


def test_create_request_carries_sandbox_config(emulator: k.KubeletEmulator) -> None:
    manifest = pod(ctr(), init=[ctr("init")], annotations={"a": "b"})
    sandbox = emulator.sandbox_config(manifest)
    running = k.RunningPod(
        name="p", namespace="ns", uid=UID, qos=ks.BEST_EFFORT,
        cgroup_parent=sandbox.linux.cgroup_parent, sandbox_id="sb", sandbox_config=sandbox,
        manifest=manifest,
    )  # fmt: skip
    req = emulator.create_request(running, "init")
    assert req.pod_sandbox_id == "sb"
    assert req.sandbox_config == sandbox
    assert req.config.metadata.name == "init"
    with pytest.raises(KeyError):
        emulator.create_request(running, "missing")
