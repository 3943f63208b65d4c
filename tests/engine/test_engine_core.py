"""The engine's decisions in situations a real runtime cannot be made to produce on demand:
refused re-pins, calls cut off mid-way, a restart racing kubelet's retries. The runtime here is
a small stand-in with RuntimeClient's methods; the end-to-end tests use the real containerd."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import grpc
import pytest

from enforcer.configuration import parse_config
from enforcer.cri import api_pb2
from enforcer.engine import Enforcer, Refused
from enforcer.refusal import Reason
from enforcer.runtime import RuntimeContainer
from enforcer.state import StateStore
from enforcer.topology import CPUSet, Topology
from tests.support.kubelet import container_config_for, sandbox_config_for
from tests.support.pods import guaranteed, manifest, sleeper

MACHINE = Topology.synthetic(sockets=1, cores_per_node=4, threads_per_core=1)  # CPUs 0-3
CONFIG = parse_config({"policy": {"name": "static", "reservedCPUs": "0"}})


class RpcFailure(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode) -> None:
        self._code = code

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return f"stand-in runtime says {self._code.name}"


class StandInRuntime:
    """What the engine asks of the runtime, with failures on demand."""

    def __init__(self) -> None:
        self.containers: dict[str, RuntimeContainer] = {}
        self.cpus: dict[str, str] = {}
        self.refuse_updates: grpc.StatusCode | None = None
        self.updates: list[tuple[str, str]] = []  # (container id, cpuset), in order
        self.down = False

    def add(self, cid: str, key: str) -> None:
        uid, name = key.split("/")
        self.containers[cid] = RuntimeContainer(
            cid, "sandbox", name, 0, api_pb2.CONTAINER_RUNNING, {"io.kubernetes.pod.uid": uid}
        )

    def update_resources(self, cid: str, resources: api_pb2.LinuxContainerResources) -> None:
        if self.refuse_updates is not None:
            raise RpcFailure(self.refuse_updates)
        self.cpus[cid] = resources.cpuset_cpus
        self.updates.append((cid, resources.cpuset_cpus))

    def list_containers(self) -> list[RuntimeContainer]:
        if self.down:
            raise RpcFailure(grpc.StatusCode.UNAVAILABLE)
        return list(self.containers.values())


def create_request(name: str, resources: dict | None = None) -> api_pb2.CreateContainerRequest:
    uid = str(uuid.uuid5(uuid.NAMESPACE_URL, name))
    pod = manifest(name, sleeper(resources=resources))
    return api_pb2.CreateContainerRequest(
        pod_sandbox_id="sandbox",
        config=container_config_for(
            pod, pod["spec"]["containers"][0], uid, memory_capacity=1 << 34
        ),
        sandbox_config=sandbox_config_for(pod, uid),
    )


def enforcer(tmp_path: Path, runtime: StandInRuntime) -> Enforcer:
    store = StateStore(tmp_path / "state")
    store.ensure_dir()
    return Enforcer(topology=MACHINE, config=CONFIG, store=store, runtime=runtime)  # type: ignore[arg-type]


def create(e: Enforcer, runtime: StandInRuntime, name: str, resources: dict | None = None) -> str:
    request = create_request(name, resources)
    key = e.create_container(request)
    cid = f"cid-{name}"
    runtime.add(cid, key)
    runtime.cpus[cid] = request.config.linux.resources.cpuset_cpus
    e.container_created(key, cid)
    return cid


def test_refused_repin_is_shown_and_retried(tmp_path: Path) -> None:
    runtime = StandInRuntime()
    e = enforcer(tmp_path, runtime)
    shared = create(e, runtime, "shared")
    assert runtime.cpus[shared] == "0-3"
    runtime.refuse_updates = grpc.StatusCode.UNAVAILABLE
    create(e, runtime, "exclusive", guaranteed("2"))
    assert e.repin_failed
    row = next(v for v in e.views() if v.pod == "shared")
    assert row.cpus == "0-3 (to 0,3)"  # what it has, and where it is going
    runtime.refuse_updates = None
    e.maintain()
    assert runtime.cpus[shared] == "0,3" and not e.repin_failed
    assert next(v for v in e.views() if v.pod == "shared").cpus == "0,3"


def test_restart_does_not_free_a_retried_creation(tmp_path: Path) -> None:
    runtime = StandInRuntime()
    first = enforcer(tmp_path, runtime)
    key = first.create_container(create_request("retried", guaranteed("2")))  # then killed
    again = enforcer(tmp_path, runtime)
    again.restore_saved()
    # kubelet retries the creation before the runtime could be asked about the first one.
    assert again.create_container(create_request("retried", guaranteed("2"))) == key
    again.reconcile()  # the runtime has no such container yet: it is being created right now
    assert key in again.policy.admitted
    runtime.add("cid-late", key)
    again.container_created(key, "cid-late")
    assert again.ledger.by_key[key].container_id == "cid-late"


@pytest.mark.parametrize("exists", [True, False])
def test_cut_off_creation_asks_the_runtime(tmp_path: Path, exists: bool) -> None:
    runtime = StandInRuntime()
    e = enforcer(tmp_path, runtime)
    key = e.create_container(create_request("cut", guaranteed("1")))
    if exists:
        runtime.add("cid-cut", key)
    e.create_failed(key, grpc.StatusCode.CANCELLED.value[0], "the client went away")
    if exists:
        assert e.ledger.by_key[key].container_id == "cid-cut"
    else:
        assert key not in e.policy.admitted


def test_cut_off_creation_waits_while_the_runtime_is_away(tmp_path: Path) -> None:
    runtime = StandInRuntime()
    e = enforcer(tmp_path, runtime)
    key = e.create_container(create_request("wait", guaranteed("1")))
    runtime.down = True
    e.create_failed(key, grpc.StatusCode.UNAVAILABLE.value[0], "connection lost")
    assert key in e.policy.admitted  # still held: it may exist
    runtime.down = False
    e.maintain()
    assert key not in e.policy.admitted


def test_kubelets_empty_filter_listing_releases_vanished_containers(tmp_path: Path) -> None:
    runtime = StandInRuntime()
    e = enforcer(tmp_path, runtime)
    cid = create(e, runtime, "vanishing", guaranteed("1"))
    complete = (
        api_pb2.ListContainersRequest(filter=api_pb2.ContainerFilter()).filter.ByteSize() == 0
    )
    assert complete  # what the relay decides for kubelet's relisting
    e.observed([], complete=complete, asked_at=e.sequence)
    assert all(t.container_id != cid for t in e.ledger.by_key.values())
    assert not e.policy.taken


def test_in_place_resize_is_placed_anew(tmp_path: Path) -> None:
    runtime = StandInRuntime()
    e = enforcer(tmp_path, runtime)
    cid = create(e, runtime, "grow", guaranteed("1"))
    update = api_pb2.UpdateContainerResourcesRequest(
        container_id=cid,
        linux=api_pb2.LinuxContainerResources(
            cpu_period=100000, cpu_quota=200000, cpu_shares=2048, memory_limit_in_bytes=64 << 20
        ),
    )
    e.update_resources(update)
    assert len(e.policy.taken) == 2
    assert CPUSet.parse(update.linux.cpuset_cpus) == e.policy.taken


def test_state_of_another_shape_is_moved_aside_not_fatal(tmp_path: Path) -> None:
    runtime = StandInRuntime()
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / "state.json").write_text(json.dumps({"version": 1, "policy": {"admitted": [{}]}}))
    e = enforcer(tmp_path, runtime)
    e.restore_saved()
    assert not e.policy.admitted
    assert list(state.glob("state.json.corrupt-*"))


def test_status_never_moves_the_state_file(tmp_path: Path) -> None:
    from enforcer.commands.status import status

    (tmp_path / "state.json").write_text(json.dumps({"version": 2}))
    assert status(str(tmp_path)) == 1
    assert (tmp_path / "state.json").exists()


def test_an_enforcer_not_in_charge_refuses_to_decide(tmp_path: Path) -> None:
    runtime = StandInRuntime()
    e = enforcer(tmp_path, runtime)
    e.not_in_charge = "the enforcer is stopping before it took over the node"
    with pytest.raises(Refused) as err:
        e.create_container(create_request("late", guaranteed("1")))
    assert err.value.reason == Reason.UNAVAILABLE
    assert not e.policy.admitted


def test_reconfiguration_moves_shared_containers_out_before_exclusive_ones_move_in(
    tmp_path: Path,
) -> None:
    runtime = StandInRuntime()
    e = enforcer(tmp_path, runtime)
    holder = create(e, runtime, "holder", guaranteed("2"))
    sharer = create(e, runtime, "sharer")
    held = runtime.cpus[holder]
    runtime.updates.clear()
    # The held CPUs become reserved: the holder must move onto CPUs the sharer is on now.
    e.reconfigure(parse_config({"policy": {"name": "static", "reservedCPUs": held}}))
    order = [cid for cid, _ in runtime.updates]
    assert order == [sharer, holder]
    assert not CPUSet.parse(runtime.cpus[holder]) & CPUSet.parse(runtime.cpus[sharer])
