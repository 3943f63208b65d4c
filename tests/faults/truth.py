"""What the node really runs, read where it lives: containerd's own CRI answers (straight from
its socket, never through the relay) and the kernel's cgroup files.

Nothing here asks the enforcer. A container's QoS class comes from the cgroup parent in its
runtime spec (kubelet's `/kubepods/...` layout), its CPUs from `cpuset.cpus` of its own cgroup.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import grpc

from enforcer.cri import api_pb2, api_pb2_grpc
from enforcer.topology import CPUSet
from tests.support.kubelet_sends import BEST_EFFORT, BURSTABLE, GUARANTEED

# Short reconnect backoffs: containerd and the relay are restarted under the suite's channels.
FAST_RECONNECT: tuple[tuple[str, int], ...] = (
    ("grpc.initial_reconnect_backoff_ms", 50),
    ("grpc.min_reconnect_backoff_ms", 50),
    ("grpc.max_reconnect_backoff_ms", 250),
)


def online_cpus(sysfs_root: str = "/sys") -> CPUSet:
    return CPUSet.parse(Path(sysfs_root, "devices/system/cpu/online").read_text())


def qos_of_cgroup(cgroups_path: str) -> str:
    """The QoS class kubelet's cgroupfs layout encodes in a container's cgroup parent."""
    parts = cgroups_path.strip("/").split("/")
    if len(parts) < 2 or parts[0] != "kubepods":
        return "unknown"
    if parts[1] == "burstable":
        return BURSTABLE
    if parts[1] == "besteffort":
        return BEST_EFFORT
    return GUARANTEED if parts[1].startswith("pod") else "unknown"


@dataclass(frozen=True)
class Seen:
    """One container as containerd and the kernel show it."""

    id: str
    sandbox_id: str
    pod: str  # namespace/name
    uid: str
    name: str
    attempt: int
    state: int
    qos: str
    spec_cpus: CPUSet | None  # the cpuset in containerd's runtime spec (None: not set)
    cpus: CPUSet | None  # the kernel's cpuset.cpus of its cgroup; None unless running

    @property
    def running(self) -> bool:
        return self.cpus is not None

    @property
    def label(self) -> str:
        return f"{self.qos} {self.pod}/{self.name}#{self.attempt} ({self.id[:12]})"


class Truth:
    """Reads containerd directly and the cgroup files of its containers."""

    def __init__(self, address: str, cgroupfs_root: str = "/sys/fs/cgroup") -> None:
        self.channel = grpc.insecure_channel(address, options=list(FAST_RECONNECT))
        self.runtime = api_pb2_grpc.RuntimeServiceStub(self.channel)
        self.cpuset_root = Path(cgroupfs_root, "cpuset")

    def close(self) -> None:
        self.channel.close()

    def snapshot(self, timeout: float = 10.0) -> list[Seen]:
        """Every container containerd has, in any state. Raises grpc.RpcError when containerd
        does not answer."""
        listed = self.runtime.ListContainers(api_pb2.ListContainersRequest(), timeout=timeout)
        seen = []
        for c in listed.containers:
            try:
                answer = self.runtime.ContainerStatus(
                    api_pb2.ContainerStatusRequest(container_id=c.id, verbose=True),
                    timeout=timeout,
                )
            except grpc.RpcError as exc:
                if exc.code() == grpc.StatusCode.NOT_FOUND:
                    continue  # removed since the listing
                raise
            info = json.loads(answer.info.get("info") or "{}")
            linux = (info.get("runtimeSpec") or {}).get("linux") or {}
            cgroups_path = linux.get("cgroupsPath") or ""
            spec_cpus_text = ((linux.get("resources") or {}).get("cpu") or {}).get("cpus")
            state = answer.status.state
            cpus = None
            if state == api_pb2.CONTAINER_RUNNING and cgroups_path:
                try:
                    text = (self.cpuset_root / cgroups_path.strip("/") / "cpuset.cpus").read_text()
                    cpus = CPUSet.parse(text)
                except FileNotFoundError:
                    state = api_pb2.CONTAINER_EXITED  # ended since the listing
            labels = c.labels
            seen.append(
                Seen(
                    id=c.id,
                    sandbox_id=c.pod_sandbox_id,
                    pod=f"{labels.get('io.kubernetes.pod.namespace', '?')}/"
                    f"{labels.get('io.kubernetes.pod.name', '?')}",
                    uid=labels.get("io.kubernetes.pod.uid", ""),
                    name=c.metadata.name,
                    attempt=c.metadata.attempt,
                    state=state,
                    qos=qos_of_cgroup(cgroups_path),
                    spec_cpus=CPUSet.parse(spec_cpus_text) if spec_cpus_text else None,
                    cpus=cpus,
                )
            )
        return seen

    def write_cpus(self, seen: Seen, cpus: CPUSet) -> None:
        """Writes a container's cpuset.cpus behind everyone's back (the foreign-write fault)."""
        path = self._cgroup_of(seen.id)
        (path / "cpuset.cpus").write_text(str(cpus))

    def _cgroup_of(self, container_id: str) -> Path:
        answer = self.runtime.ContainerStatus(
            api_pb2.ContainerStatusRequest(container_id=container_id, verbose=True), timeout=10
        )
        info = json.loads(answer.info.get("info") or "{}")
        cgroups_path = ((info.get("runtimeSpec") or {}).get("linux") or {}).get("cgroupsPath")
        if not cgroups_path:
            raise RuntimeError(f"container {container_id} has no cgroupsPath in its runtime spec")
        return self.cpuset_root / cgroups_path.strip("/")
