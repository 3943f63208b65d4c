"""Stand-ins for the engine's ports in the engine tests: a runtime that is also the kernel
(failures on demand), a state store whose writes fail on demand, a clock, and helpers that
admit and create containers through the CRI adapter's conversion."""

from __future__ import annotations

import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

from enforcer.configuration import parse_config
from enforcer.controllers.cpuset import CpusetController
from enforcer.controllers.group import Controllers
from enforcer.cri.convert import container_create
from enforcer.decode import ContainerCreate
from enforcer.engine import Enforcer, LiveContainer, Pinning, Recorded
from enforcer.engine.kubelet_record import KubeletRecord
from enforcer.engine.ports import ContainerMissing, RuntimeAway
from enforcer.state import StateStore
from enforcer.topology import Topology
from resource_contract.config import Config
from tests.support.kubelet import container_config_for, sandbox_config_for
from tests.support.pods import manifest, sleeper

MACHINE = Topology.synthetic(sockets=1, cores_per_node=4, threads_per_core=1)  # CPUs 0-3
CONFIG = parse_config({"policy": {"name": "static", "reservedCPUs": "0"}})


class StandInRuntime:
    """The engine's runtime port, with failures on demand; it is also the kernel: a re-pin
    sets the container's cpuset, and a test can change one behind the engine's back."""

    def __init__(self) -> None:
        self.containers: dict[str, LiveContainer] = {}
        self.cpus: dict[str, str] = {}
        self.refuse_updates: Exception | None = None
        self.ignore_updates = False  # answers OK but the kernel keeps what it had
        self.updates: list[tuple[str, str]] = []  # (container id, cpuset), in order
        self.down = False
        self.recorded_creates: dict[str, Recorded] = {}

    def add(self, cid: str, key: str, *, running: bool = True) -> None:
        self.containers[cid] = LiveContainer(cid, "sandbox", key, running=running, exited=False)

    def repin(self, container_id: str, resources: KubeletRecord, pinning: Pinning) -> KubeletRecord:
        if self.refuse_updates is not None:
            raise self.refuse_updates
        if container_id not in self.containers:
            raise ContainerMissing(container_id)
        if not self.ignore_updates:
            self.cpus[container_id] = pinning.cpus
        self.updates.append((container_id, pinning.cpus))
        return replace(resources, cpuset_cpus=pinning.cpus)

    def list_containers(self) -> list[LiveContainer]:
        if self.down:
            raise RuntimeAway("stand-in runtime is down")
        return list(self.containers.values())

    def recorded(self, container: LiveContainer) -> Recorded | None:
        return self.recorded_creates.get(container.id)

    # -- the kernel (CpusetReader) --
    def read(self, cgroup_parent: str, container_id: str) -> tuple[str, str] | None:
        if container_id not in self.cpus:
            return None
        return self.cpus[container_id], ""


class FailingStore(StateStore):
    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.fail: OSError | None = None

    def save(self, data: dict[str, Any], *, durable: bool = True, sync_later: bool = False) -> None:
        if self.fail is not None:
            raise self.fail
        super().save(data, durable=durable, sync_later=sync_later)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def create_of(name: str, resources: dict | None = None) -> ContainerCreate:
    """What kubelet's CreateContainer for a one-container pod asks, through the CRI adapter."""
    from enforcer.cri import api_pb2

    uid = str(uuid.uuid5(uuid.NAMESPACE_URL, name))
    pod = manifest(name, sleeper(resources=resources))
    request = api_pb2.CreateContainerRequest(
        pod_sandbox_id="sandbox",
        config=container_config_for(
            pod, pod["spec"]["containers"][0], uid, memory_capacity=1 << 34
        ),
        sandbox_config=sandbox_config_for(pod, uid),
    )
    return container_create(request)


def enforcer(
    tmp_path: Path,
    runtime: StandInRuntime,
    config: Config = CONFIG,
    *,
    clock: Clock | None = None,
    reconciled: bool = True,
) -> Enforcer:
    store = FailingStore(tmp_path / "state")
    store.ensure_dir()
    e = Enforcer(
        topology=MACHINE,
        config=config,
        store=store,
        runtime=runtime,
        controllers=Controllers([CpusetController(runtime)]),
        clock=clock or Clock(),
    )
    e.reconciled = reconciled
    return e


def admit(e: Enforcer, name: str, resources: dict | None = None) -> tuple[str, Pinning]:
    return e.create(create_of(name, resources), sandbox_id="sandbox", resources=KubeletRecord())


def create(e: Enforcer, runtime: StandInRuntime, name: str, resources: dict | None = None) -> str:
    key, pinning = admit(e, name, resources)
    cid = f"cid-{name}"
    runtime.add(cid, key)
    runtime.cpus[cid] = pinning.cpus or "0-3"
    e.created(key, cid)
    e.started(cid)
    return cid
