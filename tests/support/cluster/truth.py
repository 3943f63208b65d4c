"""What the node really did to a pod's containers, read from the kernel's cgroup files under
kubelet's pod cgroup (cgroupfs driver, cgroup v1) and from the runtime (its CRI status), never
from the enforcer's own state."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.cluster.kube import Kubectl, KubectlError
from tests.support.cluster.layout import CGROUP_ROOT, Layout

CGROUPFS = Path("/sys/fs/cgroup")
_QOS_DIR = {"Guaranteed": "", "Burstable": "burstable", "BestEffort": "besteffort"}


@dataclass(frozen=True)
class ContainerTruth:
    pod: str
    container: str
    qos: str
    container_id: str
    cgroup: str  # relative to a hierarchy's root: kre-cluster/kubepods[/qos]/pod<uid>/<id>
    cpus: str
    mems: str


def pod_cgroup(pod: dict[str, Any]) -> str:
    qos = pod["status"]["qosClass"]
    parts = [CGROUP_ROOT, "kubepods", _QOS_DIR[qos], f"pod{pod['metadata']['uid']}"]
    return "/".join(p for p in parts if p)


def read_cpuset(cgroup: str) -> tuple[str, str]:
    d = CGROUPFS / "cpuset" / cgroup
    return (d / "cpuset.cpus").read_text().strip(), (d / "cpuset.mems").read_text().strip()


def container_cgroup(pod_cgroup: str, container_id: str) -> str:
    """The container's cgroup under its pod's (cgroupfs driver): ``<id>`` for containerd,
    ``crio-<id>`` for CRI-O."""
    for name in (container_id, f"crio-{container_id}"):
        if (CGROUPFS / "cpuset" / pod_cgroup / name).is_dir():
            return f"{pod_cgroup}/{name}"
    return f"{pod_cgroup}/{container_id}"  # gone meanwhile: reading it fails, naming the path


def containers_of(kubectl: Kubectl, namespace: str, pod_name: str) -> list[ContainerTruth]:
    """Each running container of the pod, with its cpuset and memory nodes from its cgroup."""
    pod = kubectl.json("-n", namespace, "get", "pod", pod_name)
    base = pod_cgroup(pod)
    found = []
    for st in pod["status"].get("containerStatuses", []):
        cid = st.get("containerID", "").split("://", 1)[-1]
        if not cid or "running" not in st.get("state", {}):
            continue
        cgroup = container_cgroup(base, cid)
        cpus, mems = read_cpuset(cgroup)
        found.append(
            ContainerTruth(pod_name, st["name"], pod["status"]["qosClass"], cid, cgroup, cpus, mems)
        )
    return found


def runtime_spec(lay: Layout, container_id: str) -> dict[str, Any]:
    """The OCI spec the runtime holds for the container (what a restart re-applies), from its
    CRI ContainerStatus with ``verbose`` (containerd and CRI-O both give ``runtimeSpec``)."""
    import grpc

    from enforcer.cri import api_pb2, api_pb2_grpc

    with grpc.insecure_channel(f"unix://{lay.runtime_socket}") as channel:
        reply = api_pb2_grpc.RuntimeServiceStub(channel).ContainerStatus(
            api_pb2.ContainerStatusRequest(container_id=container_id, verbose=True), timeout=30
        )
    spec: dict[str, Any] = json.loads(reply.info["info"])["runtimeSpec"]
    return spec


def runtime_cpus(lay: Layout, container_id: str) -> str:
    spec = runtime_spec(lay, container_id)
    return str(spec.get("linux", {}).get("resources", {}).get("cpu", {}).get("cpus", ""))


def node_containers(kubectl: Kubectl) -> list[ContainerTruth]:
    """Every running container of every pod on the node (all namespaces), from the cgroups."""
    found: list[ContainerTruth] = []
    for pod in kubectl.json("get", "pods", "-A")["items"]:
        if pod["status"].get("phase") != "Running":
            continue
        try:
            found += containers_of(kubectl, pod["metadata"]["namespace"], pod["metadata"]["name"])
        except (FileNotFoundError, KubectlError):
            continue  # the pod or its container went meanwhile
    return found


def cpu_quota(cgroup: str) -> int:
    """cpu.cfs_quota_us of the container's cgroup (-1: no limit)."""
    return int((CGROUPFS / "cpu" / cgroup / "cpu.cfs_quota_us").read_text())
