"""The engine's runtime port over NRI, and the kernel reader that goes with it.

NRI has no listing call: the runtime tells the plugin of every pod and container in
Synchronize and then by events. `NriRuntime` keeps that picture (bounded by what the runtime
runs) and answers the engine's `list_containers` and `recorded` from it.

Re-pins go to the runtime as ContainerUpdates, never from inside an event handler while the
runtime waits (containerd holds its NRI lock then, and an UpdateContainers call would deadlock
until the plugin is dropped): `repin` only queues the update. The handler being served takes
the queue into its response (CreateContainer, UpdateContainer, StopContainer, Synchronize);
otherwise the sender calls UpdateContainers after the reply. Until the runtime has applied an
update, the kernel's cpuset of that container is not read (`PendingCpusets`), so the engine's
verification judges it only once it had the chance to be right.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from enforcer.controllers.cpuset import CpusetReader
from enforcer.engine.kubelet_record import KubeletRecord
from enforcer.engine.model import LiveContainer, Pinning, Recorded
from enforcer.engine.ports import ContainerMissing, RuntimeAway
from enforcer.nri.convert import container_create, cpuset_update, live_container, record_of
from enforcer.nriapi import api_pb2


class NriRuntime:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pods: dict[str, api_pb2.PodSandbox] = {}
        self._containers: dict[str, api_pb2.Container] = {}
        self._synced = False  # a Synchronize since the current registration
        self._pending: dict[str, Pinning] = {}  # container id -> update to send
        self.unconfirmed: set[str] = set()  # updates queued or not yet applied by the runtime
        self.wake: Callable[[], None] = lambda: None  # set by the plugin: the sender has work

    # -- the picture, from the runtime's messages (event loop) ---------------------------

    def synchronized(
        self, pods: Iterable[api_pb2.PodSandbox], containers: Iterable[api_pb2.Container]
    ) -> None:
        with self._lock:
            self._pods = {p.id: p for p in pods}
            self._containers = {c.id: c for c in containers}
            self._synced = True

    def disconnected(self) -> None:
        """The connection is gone: nothing is known until the next Synchronize, and queued
        updates are dropped (the engine's verification after it re-sends what is missing)."""
        with self._lock:
            self._synced = False
            self._pending.clear()
            self.unconfirmed.clear()

    def pod_seen(self, pod: api_pb2.PodSandbox) -> None:
        if pod.id:
            with self._lock:
                self._pods[pod.id] = pod

    def container_seen(
        self, pod: api_pb2.PodSandbox, container: api_pb2.Container, state: int | None = None
    ) -> None:
        if not container.id:
            return
        if state is not None:
            container.state = state  # type: ignore[assignment]
        with self._lock:
            if pod.id:
                self._pods[pod.id] = pod
            self._containers[container.id] = container

    def container_removed(self, container_id: str) -> None:
        with self._lock:
            self._containers.pop(container_id, None)
            self._pending.pop(container_id, None)
            self.unconfirmed.discard(container_id)

    def pod_removed(self, pod_id: str) -> None:
        with self._lock:
            self._pods.pop(pod_id, None)
            for cid in [c.id for c in self._containers.values() if c.pod_sandbox_id == pod_id]:
                self._containers.pop(cid, None)
                self._pending.pop(cid, None)
                self.unconfirmed.discard(cid)

    def pinned(self, container_id: str, pinning: Pinning) -> None:
        """The runtime was told (by an adjustment) to give the container this pinning."""
        with self._lock:
            found = self._containers.get(container_id)
            if found is not None:
                if pinning.cpus:
                    found.linux.resources.cpu.cpus = pinning.cpus
                if pinning.mems:
                    found.linux.resources.cpu.mems = pinning.mems

    # -- the port (engine's worker) --------------------------------------------------------

    def _need_sync(self) -> None:
        if not self._synced:
            raise RuntimeAway("not registered with the runtime's NRI (waiting for Synchronize)")

    def list_containers(self) -> list[LiveContainer]:
        with self._lock:
            self._need_sync()
            return [
                live_container(self._pods.get(c.pod_sandbox_id), c)
                for c in self._containers.values()
            ]

    def repin(self, container_id: str, resources: KubeletRecord, pinning: Pinning) -> KubeletRecord:
        with self._lock:
            self._need_sync()
            container = self._containers.get(container_id)
            if container is None:
                raise ContainerMissing(f"the runtime has no container {container_id}")
            self._pending[container_id] = pinning
            self.unconfirmed.add(container_id)
            cpu = container.linux.resources.cpu
            cpu.cpus, cpu.mems = pinning.cpus or cpu.cpus, pinning.mems or cpu.mems
        self.wake()
        return resources.pinned(pinning.cpus, pinning.mems)

    def recorded(self, container: LiveContainer) -> Recorded | None:
        with self._lock:
            self._need_sync()
            found = self._containers.get(container.id)
            pod = self._pods.get(container.sandbox_id)
            if found is None or pod is None:
                return None
            resources = found.linux.resources
            return Recorded(
                create=container_create(pod, found),
                resources=record_of(resources),
                running_cpus=resources.cpu.cpus,
                running_mems=resources.cpu.mems,
            )

    # -- the queue (event loop) ------------------------------------------------------------

    def take_updates(self) -> list[api_pb2.ContainerUpdate]:
        """The queued updates, to go in a response or an UpdateContainers call."""
        with self._lock:
            pending, self._pending = self._pending, {}
        return [cpuset_update(cid, pinning) for cid, pinning in pending.items()]

    def confirmed(self, container_ids: Iterable[str]) -> None:
        """The runtime has answered for these updates: their cgroups may be read again."""
        with self._lock:
            for cid in container_ids:
                if cid not in self._pending:
                    self.unconfirmed.discard(cid)


class PendingCpusets:
    """The kernel's cpusets, except for containers whose update the runtime has not applied
    yet: those read as unknown (None), and are verified once it has."""

    def __init__(self, inner: CpusetReader, runtime: NriRuntime) -> None:
        self.inner = inner
        self.runtime = runtime

    def read(self, cgroup_parent: str, container_id: str) -> tuple[str, str] | None:
        if container_id in self.runtime.unconfirmed:
            return None
        return self.inner.read(cgroup_parent, container_id)
