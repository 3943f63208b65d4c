"""A running container's creation rebuilt from the statuses of a runtime whose verbose status
has no creation config (CRI-O): what the relay adopts after its state file is lost."""

from __future__ import annotations

from enforcer.cri import api_pb2
from enforcer.cri.convert import cgroup_parent, container_create, request_from_statuses

UID = "0b7f6a52-1d3e-4c1b-9f0e-5f4b8c2d7a10"
WEBHOOK = "resources.resource-enforcer.dev/containers"


def statuses() -> tuple[api_pb2.PodSandboxStatus, api_pb2.ContainerStatus, dict]:
    """What CRI-O 1.34 answers for a Guaranteed 2-CPU container pinned to CPUs 2-3."""
    box = api_pb2.PodSandboxStatus(id="sb1")
    box.metadata.name, box.metadata.uid, box.metadata.namespace = "db", UID, "prod"
    box.labels["app"] = "db"
    box.annotations[WEBHOOK] = '{"main": {"requests": {"cpu": "2"}}}'
    status = api_pb2.ContainerStatus(id="c1")
    status.metadata.name, status.metadata.attempt = "main", 2
    status.annotations["io.kubernetes.container.hash"] = "abc"
    linux = status.resources.linux
    linux.cpu_period, linux.cpu_quota, linux.cpu_shares = 100000, 200000, 2048
    linux.memory_limit_in_bytes = 1 << 30
    linux.cpuset_cpus, linux.cpuset_mems = "2-3", "0"
    spec = {
        "linux": {
            "cgroupsPath": f"/kubepods/pod{UID}/crio-c1",
            "resources": {"cpu": {"cpus": "2-3", "mems": "0"}},
        }
    }
    return box, status, spec


def test_the_pod_the_container_and_its_resources_come_back_from_the_statuses() -> None:
    box, status, spec = statuses()
    request = request_from_statuses(box, status, spec)
    assert request is not None
    create = container_create(request)
    assert (create.pod_uid, create.pod_name, create.namespace) == (UID, "db", "prod")
    assert (create.container, create.attempt) == ("main", 2)
    assert create.annotations == {WEBHOOK: '{"main": {"requests": {"cpu": "2"}}}'}
    assert create.labels == {"app": "db"}
    assert create.cgroup_parent == f"/kubepods/pod{UID}"
    res = create.resources
    assert (res.cpu_quota, res.cpu_period, res.cpu_shares) == (200000, 100000, 2048)
    assert res.memory_limit == 1 << 30
    # The status shows the cpuset the enforcer applied, not the one kubelet asked for.
    assert (res.cpuset_cpus, res.cpuset_mems) == ("", "")
    assert request.pod_sandbox_id == "sb1"


def test_without_the_pods_metadata_or_the_resources_nothing_is_made_up() -> None:
    box, status, spec = statuses()
    box.metadata.uid = ""
    assert request_from_statuses(box, status, spec) is None
    box, status, spec = statuses()
    status.ClearField("resources")
    assert request_from_statuses(box, status, spec) is None


def test_the_cgroup_parent_from_either_driver_and_from_no_path() -> None:
    assert cgroup_parent({"linux": {"cgroupsPath": f"/kubepods/burstable/pod{UID}/crio-c1"}}) == (
        f"/kubepods/burstable/pod{UID}"
    )
    systemd = f"kubepods-burstable-pod{UID.replace('-', '_')}.slice:crio:c1"
    assert cgroup_parent({"linux": {"cgroupsPath": systemd}}) == (
        f"kubepods-burstable-pod{UID.replace('-', '_')}.slice"
    )
    assert cgroup_parent({}) == ""
    assert cgroup_parent({"linux": {"cgroupsPath": 7}}) == ""
    assert cgroup_parent({"linux": "garbled"}) == ""
