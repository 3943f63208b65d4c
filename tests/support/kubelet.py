"""A kubelet emulator: turns Kubernetes Pod manifests into the CRI calls kubelet makes.

It derives what kubelet sends with the cgroupfs driver (see FACTS.md, "What kubelet sends"):
the pod's QoS class and cgroup parent, the ``PodSandboxConfig`` (pod labels and annotations
copied, host networking), and per container a ``ContainerConfig`` whose
``LinuxContainerResources`` carry kubelet's CPU shares, CFS quota/period, memory limit and OOM
score adjustment. It talks CRI over a unix socket, so it drives containerd directly or through
the enforcer's relay in exactly the same way.

What it sends is derived by the pure helpers of ``tests/support/kubelet_sends.py``
(``pod_qos_class``, ``linux_resources``, ``sandbox_config_for``, ...), usable without a runtime.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
import uuid
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from enforcer.controllers.cgroups import cgroup_path, cgroup_version
from enforcer.cri import api_pb2, api_pb2_grpc
from tests.support.kubelet_sends import (
    Container,
    Pod,
    all_containers,
    container_config_for,
    node_memory_capacity,
    pod_qos_class,
    sandbox_config_for,
)
from tests.support.slow import scaled

# -- cgroups ----------------------------------------------------------------------------------


def remove_pod_cgroups(cgroup_parent: str, cgroupfs_root: str = "/sys/fs/cgroup") -> None:
    """rmdir the pod-level cgroup in every hierarchy, as kubelet does after a pod is gone.

    runc removes the container's own folder but not the parents it created.
    """
    if cgroup_parent.endswith(".slice"):
        return  # systemd owns slices
    root = Path(cgroupfs_root)
    with contextlib.suppress(OSError):
        hierarchies = [p for p in root.iterdir() if p.is_dir() and not p.is_symlink()]
        if (root / "cgroup.controllers").exists():
            hierarchies = [root]  # pure cgroup v2
        for h in hierarchies:
            with contextlib.suppress(OSError):
                (h / cgroup_parent.strip("/")).rmdir()


@dataclass
class RunningPod:
    """A pod that the emulator started: what a test needs to find its containers."""

    name: str
    namespace: str
    uid: str
    qos: str
    cgroup_parent: str
    sandbox_id: str
    sandbox_config: api_pb2.PodSandboxConfig
    manifest: Pod
    containers: dict[str, str] = field(default_factory=dict)  # name -> container id
    init_containers: dict[str, str] = field(default_factory=dict)

    def container_id(self, name: str) -> str:
        if name in self.containers:
            return self.containers[name]
        return self.init_containers[name]

    def cgroup_path(
        self, controller: str | None, container: str, cgroupfs_root: str = "/sys/fs/cgroup"
    ) -> str:
        """cgroup folder of the container named ``container`` in this pod; ``controller`` names
        the v1 hierarchy and is left out on cgroup v2 (one tree for every controller)."""
        if cgroup_version(cgroupfs_root) == 2:
            controller = None
        return cgroup_path(
            controller, self.cgroup_parent, self.container_id(container), cgroupfs_root
        )


class KubeletEmulator:
    """Drives a CRI runtime (containerd, or the relay in front of it) the way kubelet does.

    The emulator always asks for host networking (no CNI plugin is needed), whatever the
    manifest's ``hostNetwork`` says.
    """

    def __init__(
        self,
        socket_path: str,
        *,
        log_root: str | os.PathLike[str] | None = None,
        cgroup_driver: str = "cgroupfs",
        cgroupfs_root: str = "/sys/fs/cgroup",
        runtime_handler: str = "",
        timeout: float = 120.0,
        memory_capacity: int | None = None,
        channel_options: Sequence[tuple[str, Any]] = (),
    ) -> None:
        address = socket_path if "://" in socket_path else f"unix://{socket_path}"
        self.socket_path = socket_path.removeprefix("unix://")
        # channel_options: gRPC channel arguments, e.g. short reconnect backoffs for a relay
        # that is restarted under the emulator (tests/faults).
        self.channel = grpc.insecure_channel(address, options=list(channel_options))
        self.runtime = api_pb2_grpc.RuntimeServiceStub(self.channel)
        self.images = api_pb2_grpc.ImageServiceStub(self.channel)
        self._own_log_root = log_root is None
        # Made on first use (run_pod_sandbox), so an emulator that runs no pod leaves nothing.
        self.log_root = Path(
            log_root or Path(tempfile.gettempdir()) / f"kre-pod-logs-{uuid.uuid4().hex[:12]}"
        )
        # Our own log folder goes at close(), or at exit if close() is never called.
        self._log_cleanup = (
            weakref.finalize(self, shutil.rmtree, str(self.log_root), True)
            if self._own_log_root
            else None
        )
        self.cgroup_driver = cgroup_driver
        self.cgroupfs_root = cgroupfs_root
        self.runtime_handler = runtime_handler
        # Each RPC's deadline: kubelet's own default (runtimeRequestTimeout, 2 min), stretched by
        # KRE_TIMEOUT_SCALE in the VM. A deadline here catches a hang, never a slow machine: with
        # 30 s, a RunPodSandbox on a loaded CI machine once ran past it.
        self.timeout = scaled(timeout)
        self.memory_capacity = memory_capacity or node_memory_capacity()
        self.pods: dict[str, RunningPod] = {}  # sandbox id -> pod

    def __enter__(self) -> KubeletEmulator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self, remove_pods: bool = True) -> None:
        """Remove the pods this emulator started (best effort) and close the channel."""
        if remove_pods:
            for pod in list(self.pods.values()):
                with contextlib.suppress(grpc.RpcError):
                    self.remove_pod(pod)
        self.channel.close()
        if self._log_cleanup is not None:
            self._log_cleanup()

    # -- what kubelet sends -------------------------------------------------------------------

    def sandbox_config(
        self, pod: Pod, uid: str | None = None, attempt: int = 0
    ) -> api_pb2.PodSandboxConfig:
        """The PodSandboxConfig kubelet derives from ``pod``."""
        return sandbox_config_for(
            pod, uid, attempt, log_root=self.log_root, cgroup_driver=self.cgroup_driver
        )

    def container_config(
        self, pod: Pod, container: Container, uid: str, attempt: int = 0
    ) -> api_pb2.ContainerConfig:
        """The ContainerConfig kubelet derives for one (init) container of ``pod``."""
        return container_config_for(
            pod, container, uid, attempt, memory_capacity=self.memory_capacity
        )

    def create_request(
        self, pod: RunningPod, container: str | Container, attempt: int = 0
    ) -> api_pb2.CreateContainerRequest:
        """The CreateContainerRequest for a container of a running pod (by name or spec)."""
        spec = self._find_container(pod.manifest, container)
        return api_pb2.CreateContainerRequest(
            pod_sandbox_id=pod.sandbox_id,
            config=self.container_config(pod.manifest, spec, pod.uid, attempt),
            sandbox_config=pod.sandbox_config,
        )

    # -- pod life cycle -------------------------------------------------------------------

    def run_pod_sandbox(self, pod: Pod, uid: str | None = None) -> RunningPod:
        """RunPodSandbox only; containers are added with create_container/start_container."""
        config = self.sandbox_config(pod, uid)
        # Kubelet creates the log folder before it runs the sandbox.
        Path(config.log_directory).mkdir(parents=True, exist_ok=True)
        resp = self.runtime.RunPodSandbox(
            api_pb2.RunPodSandboxRequest(config=config, runtime_handler=self.runtime_handler),
            timeout=self.timeout,
        )
        running = RunningPod(
            name=config.metadata.name,
            namespace=config.metadata.namespace,
            uid=config.metadata.uid,
            qos=pod_qos_class(pod),
            cgroup_parent=config.linux.cgroup_parent,
            sandbox_id=resp.pod_sandbox_id,
            sandbox_config=config,
            manifest=pod,
        )
        self.pods[running.sandbox_id] = running
        return running

    def create_container(
        self,
        pod: RunningPod,
        container: str | Container,
        attempt: int = 0,
        request: api_pb2.CreateContainerRequest | None = None,
    ) -> str:
        """CreateContainer; returns the id. A refused request raises the grpc.RpcError.

        ``request`` replaces the derived request (build one with ``create_request`` and edit
        it to send something kubelet would not).
        """
        request = request or self.create_request(pod, container, attempt)
        # kubelet makes the container's log folder (<pod log dir>/<name>/) before it asks;
        # containerd would make it itself, CRI-O's conmon does not.
        log_dir = Path(request.sandbox_config.log_directory)
        if request.sandbox_config.log_directory and request.config.log_path:
            (log_dir / request.config.log_path).parent.mkdir(parents=True, exist_ok=True)
        resp = self.runtime.CreateContainer(request, timeout=self.timeout)
        name = request.config.metadata.name
        init_names = {
            c["name"] for c in (pod.manifest.get("spec") or {}).get("initContainers") or []
        }
        (pod.init_containers if name in init_names else pod.containers)[name] = resp.container_id
        return resp.container_id

    def start_container(self, container_id: str) -> None:
        self.runtime.StartContainer(
            api_pb2.StartContainerRequest(container_id=container_id), timeout=self.timeout
        )

    def run_pod(self, pod: Pod, uid: str | None = None, init_timeout: float = 30.0) -> RunningPod:
        """Run a whole pod as kubelet does: sandbox, init containers in order, then containers.

        Each init container must exit 0 before the next one starts (sidecars, i.e. init
        containers with ``restartPolicy: Always``, only have to be running). If a call fails,
        the pod is removed again and the error (e.g. the grpc.RpcError of a refused
        CreateContainer) propagates.
        """
        running = self.run_pod_sandbox(pod, uid)
        try:
            spec = pod.get("spec") or {}
            for c in spec.get("initContainers") or []:
                cid = self.create_container(running, c)
                self.start_container(cid)
                if c.get("restartPolicy") == "Always":
                    continue
                status = self.wait_container_exit(cid, init_timeout)
                if status.exit_code != 0:
                    raise RuntimeError(
                        f"init container {c['name']} of pod {running.namespace}/{running.name} "
                        f"exited with code {status.exit_code}: {status.reason} {status.message}"
                    )
            for c in spec.get("containers") or []:
                cid = self.create_container(running, c)
                self.start_container(cid)
        except BaseException:
            with contextlib.suppress(grpc.RpcError):
                self.remove_pod(running)
            raise
        return running

    def stop_pod(self, pod: RunningPod, grace_period: int = 0) -> None:
        """StopContainer for every container (``grace_period`` seconds), then StopPodSandbox."""
        for cid in [*pod.containers.values(), *pod.init_containers.values()]:
            with contextlib.suppress(grpc.RpcError):
                self.runtime.StopContainer(
                    api_pb2.StopContainerRequest(container_id=cid, timeout=grace_period),
                    timeout=self.timeout + grace_period,
                )
        self.runtime.StopPodSandbox(
            api_pb2.StopPodSandboxRequest(pod_sandbox_id=pod.sandbox_id), timeout=self.timeout
        )

    def remove_pod(self, pod: RunningPod, grace_period: int = 0) -> None:
        """Stop the pod, remove its containers and sandbox, then its pod-level cgroup."""
        try:
            self.stop_pod(pod, grace_period)
            for cid in [*pod.containers.values(), *pod.init_containers.values()]:
                self.runtime.RemoveContainer(
                    api_pb2.RemoveContainerRequest(container_id=cid), timeout=self.timeout
                )
            self.runtime.RemovePodSandbox(
                api_pb2.RemovePodSandboxRequest(pod_sandbox_id=pod.sandbox_id),
                timeout=self.timeout,
            )
        finally:
            self.pods.pop(pod.sandbox_id, None)
            if self.cgroup_driver == "cgroupfs":
                remove_pod_cgroups(pod.cgroup_parent, self.cgroupfs_root)
            shutil.rmtree(pod.sandbox_config.log_directory, ignore_errors=True)

    # -- other calls --------------------------------------------------------------------------

    def update_container_resources(
        self,
        container_id: str,
        resources: api_pb2.LinuxContainerResources | Mapping[str, Any],
        annotations: Mapping[str, str] | None = None,
    ) -> None:
        """UpdateContainerResources; ``resources`` may be a message or its fields as a dict."""
        if not isinstance(resources, api_pb2.LinuxContainerResources):
            resources = api_pb2.LinuxContainerResources(**resources)
        self.runtime.UpdateContainerResources(
            api_pb2.UpdateContainerResourcesRequest(
                container_id=container_id, linux=resources, annotations=dict(annotations or {})
            ),
            timeout=self.timeout,
        )

    def list_containers(self, pod_sandbox_id: str = "") -> list[api_pb2.Container]:
        # kubelet always sends a filter, empty when it lists everything.
        req = api_pb2.ListContainersRequest(filter=api_pb2.ContainerFilter())
        if pod_sandbox_id:
            req.filter.pod_sandbox_id = pod_sandbox_id
        return list(self.runtime.ListContainers(req, timeout=self.timeout).containers)

    def list_pod_sandboxes(self) -> list[api_pb2.PodSandbox]:
        return list(
            self.runtime.ListPodSandbox(api_pb2.ListPodSandboxRequest(), timeout=self.timeout).items
        )

    def container_status(self, container_id: str, verbose: bool = False) -> api_pb2.ContainerStatus:
        return self.runtime.ContainerStatus(
            api_pb2.ContainerStatusRequest(container_id=container_id, verbose=verbose),
            timeout=self.timeout,
        ).status

    def exec_sync(
        self, container_id: str, cmd: Iterable[str], timeout: int = 10
    ) -> api_pb2.ExecSyncResponse:
        return self.runtime.ExecSync(
            api_pb2.ExecSyncRequest(container_id=container_id, cmd=list(cmd), timeout=timeout),
            timeout=self.timeout + timeout,
        )

    def version(self) -> api_pb2.VersionResponse:
        return self.runtime.Version(api_pb2.VersionRequest(version="v1"), timeout=self.timeout)

    def wait_container_exit(
        self, container_id: str, timeout: float = 30.0
    ) -> api_pb2.ContainerStatus:
        deadline = time.monotonic() + timeout
        while True:
            status = self.container_status(container_id)
            if status.state == api_pb2.CONTAINER_EXITED:
                return status
            if time.monotonic() > deadline:
                raise TimeoutError(f"container {container_id} still running after {timeout}s")
            time.sleep(0.05)

    @staticmethod
    def _find_container(pod: Pod, container: str | Container) -> Container:
        if not isinstance(container, str):
            return container
        for c in all_containers(pod):
            if c.get("name") == container:
                return c
        raise KeyError(f"no container {container!r} in pod {pod.get('metadata', {}).get('name')}")
