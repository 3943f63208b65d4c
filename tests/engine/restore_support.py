"""Helpers of the state repair tests: a state folder written by the real engine (three
containers, two of them exclusive), the stand-in runtime they run in, and small damages."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from enforcer.configuration import parse_config
from enforcer.cri import api_pb2
from enforcer.cri.convert import container_create
from enforcer.decode import ContainerCreate
from enforcer.engine import Enforcer, LiveContainer, Pinning, Recorded
from enforcer.engine.kubelet_record import KubeletRecord
from enforcer.state import StateStore
from enforcer.state.encoding import encode_state
from enforcer.topology import Topology
from tests.support.kubelet import container_config_for, sandbox_config_for
from tests.support.pods import manifest, sleeper

MACHINE = Topology.synthetic(sockets=1, cores_per_node=4, threads_per_core=1)  # CPUs 0-3
CONFIG = parse_config({"policy": {"name": "static", "reservedCPUs": "0"}})
NAMES = ("first", "second", "third")  # two exclusive containers and a shared one


class Runtime:
    """The engine's runtime port as restore and reconciliation use it: these containers run,
    and nothing about them is recorded (a dropped entry's container is not adopted here)."""

    def __init__(self) -> None:
        self.containers: dict[str, LiveContainer] = {}

    def list_containers(self) -> list[LiveContainer]:
        return list(self.containers.values())

    def repin(self, container_id: str, resources: KubeletRecord, pinning: Pinning) -> KubeletRecord:
        return resources

    def recorded(self, container: LiveContainer) -> Recorded | None:
        return None


def create_of(name: str, resources: dict | None = None, attempt: int = 0) -> ContainerCreate:
    uid = str(uuid.uuid5(uuid.NAMESPACE_URL, name))
    pod = manifest(name, sleeper(resources=resources))
    request = api_pb2.CreateContainerRequest(
        pod_sandbox_id=f"sandbox-{name}",
        config=container_config_for(
            pod, pod["spec"]["containers"][0], uid, attempt, memory_capacity=1 << 34
        ),
        sandbox_config=sandbox_config_for(pod, uid),
    )
    return container_create(request)


def make(folder: Path, runtime: Runtime, store: StateStore | None = None) -> Enforcer:
    store = store or StateStore(folder)
    store.ensure_dir()
    e = Enforcer(topology=MACHINE, config=CONFIG, store=store, runtime=runtime)
    return e


def admit(e: Enforcer, name: str, resources: dict | None = None, attempt: int = 0) -> str:
    return e.create(
        create_of(name, resources, attempt), sandbox_id=f"sandbox-{name}", resources=KubeletRecord()
    )[0]


def create(
    e: Enforcer, runtime: Runtime, name: str, resources: dict | None = None, attempt: int = 0
) -> None:
    key = admit(e, name, resources, attempt)
    cid = f"cid-{name}"
    runtime.containers[cid] = LiveContainer(cid, f"sandbox-{name}", key, running=True, exited=False)
    e.created(key, cid)
    e.started(cid)


State = dict[str, Any]


def edit(change: Callable[[State], object]) -> Callable[[Path], None]:
    def damage(path: Path) -> None:
        state = json.loads(path.read_text())
        change(state)
        path.write_bytes(encode_state(state))  # a writer's bug: the checksum matches

    return damage


def raw(data: bytes | Callable[[bytes], bytes]) -> Callable[[Path], None]:
    def damage(path: Path) -> None:
        path.write_bytes(data(path.read_bytes()) if callable(data) else data)

    return damage


def nested(levels: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(levels):
        value = [value]
    return value


def admitted(state: State, i: int) -> dict[str, Any]:
    return state["policy"]["admitted"][i]


def setitem(mapping: Any, key: Any, value: Any) -> None:
    mapping[key] = value
