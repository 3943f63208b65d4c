"""The engine's decisions in situations a real runtime cannot be made to produce on demand:
refused re-pins, calls cut off mid-way, a restart racing kubelet's retries, state writes that
fail, cpusets that drift, configurations that cannot place a running container. The runtime
and the kernel here are small stand-ins for the engine's ports; the end-to-end tests and the
fault suite use the real containerd and cgroups."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from enforcer.configuration import parse_config
from enforcer.controllers.cpuset import CpusetController
from enforcer.controllers.group import Controllers
from enforcer.cri.convert import container_create
from enforcer.decode import ContainerCreate
from enforcer.engine import Enforcer, LiveContainer, Phase, Pinning, Recorded
from enforcer.engine.kubelet_record import KubeletRecord
from enforcer.engine.ports import ContainerMissing, RuntimeAway
from enforcer.engine.registry import StateWriteFailed
from enforcer.refusal import Reason, Refusal
from enforcer.state import StateStore
from enforcer.topology import CPUSet, Topology
from resource_contract.config import Config
from tests.support.kubelet import container_config_for, sandbox_config_for
from tests.support.pods import guaranteed, manifest, sleeper

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


def test_refused_repin_is_shown_and_retried(tmp_path: Path) -> None:
    runtime = StandInRuntime()
    e = enforcer(tmp_path, runtime)
    shared = create(e, runtime, "shared")
    assert runtime.cpus[shared] == "0-3"
    runtime.refuse_updates = RuntimeAway("stand-in runtime is away")
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
    key, _ = admit(first, "retried", guaranteed("2"))  # then killed
    again = enforcer(tmp_path, runtime, reconciled=False)
    again.restore_saved()
    again.reconcile()  # the runtime has no such container: its creation never completed
    # kubelet retries the creation; the CPUs are decided anew.
    assert admit(again, "retried", guaranteed("2"))[0] == key
    assert key in again.policy.admitted
    runtime.add("cid-late", key)
    again.created(key, "cid-late")
    entry = again.registry.get(key)
    assert entry is not None and entry.container_id == "cid-late"


def test_no_decision_before_the_runtime_was_read(tmp_path: Path) -> None:
    runtime = StandInRuntime()
    e = enforcer(tmp_path, runtime, reconciled=False)
    with pytest.raises(Refusal) as err:
        admit(e, "early", guaranteed("1"))
    assert err.value.reason is Reason.UNAVAILABLE
    assert "not yet read the runtime" in str(err.value)
    e.reconcile()
    admit(e, "early", guaranteed("1"))


def test_cut_off_creation_is_bound_when_the_runtime_shows_it(tmp_path: Path) -> None:
    runtime = StandInRuntime()
    e = enforcer(tmp_path, runtime)
    key, _ = admit(e, "cut", guaranteed("1"))
    runtime.add("cid-cut", key)
    e.create_failed(key, uncertain=True, details="the client went away")
    entry = e.registry.get(key)
    assert entry is not None and entry.container_id == "cid-cut"


def test_cut_off_creation_keeps_its_cpus_until_the_runtime_has_the_last_word(
    tmp_path: Path,
) -> None:
    # The runtime may still be creating the container when kubelet gives up on the call: an
    # empty listing right then proves nothing, and the CPU must not go to the next pod.
    runtime = StandInRuntime()
    clock = Clock()
    e = enforcer(tmp_path, runtime, clock=clock)
    key, first = admit(e, "orphan", guaranteed("1"))
    e.create_failed(key, uncertain=True, details="deadline exceeded")
    entry = e.registry.get(key)
    assert entry is not None and entry.phase is Phase.UNKNOWN
    with pytest.raises(Refusal) as err:  # the only exclusive CPU left is still held
        admit(e, "next", guaranteed("3"))
    assert err.value.reason is Reason.NO_ROOM
    # The orphan shows up later: it is bound, still on its CPU.
    clock.now += 5
    runtime.add("cid-orphan", key)
    e.maintain()
    entry = e.registry.get(key)
    assert entry is not None and entry.container_id == "cid-orphan"
    assert e.policy.placement(key).exclusive == CPUSet.parse(first.cpus)


def test_cut_off_creation_the_runtime_never_shows_is_released_once_settled(
    tmp_path: Path,
) -> None:
    runtime = StandInRuntime()
    clock = Clock()
    e = enforcer(tmp_path, runtime, clock=clock)
    key, _ = admit(e, "never", guaranteed("1"))
    e.create_failed(key, uncertain=True, details="cancelled")
    e.maintain()
    assert key in e.policy.admitted  # too early to tell
    clock.now += 11
    e.maintain()
    assert key not in e.policy.admitted


def test_cut_off_creation_waits_while_the_runtime_is_away(tmp_path: Path) -> None:
    runtime = StandInRuntime()
    clock = Clock()
    e = enforcer(tmp_path, runtime, clock=clock)
    key, _ = admit(e, "wait", guaranteed("1"))
    runtime.down = True
    e.create_failed(key, uncertain=True, details="connection lost")
    clock.now += 60
    e.maintain()
    assert key in e.policy.admitted  # still held: it may exist
    runtime.down = False
    e.maintain()
    assert key not in e.policy.admitted


def test_a_creation_the_runtime_refused_is_released_at_once(tmp_path: Path) -> None:
    runtime = StandInRuntime()
    e = enforcer(tmp_path, runtime)
    key, _ = admit(e, "refused", guaranteed("1"))
    e.create_failed(key, uncertain=False, details="image not found")
    assert key not in e.policy.admitted


def test_kubelets_empty_filter_listing_releases_vanished_containers(tmp_path: Path) -> None:
    runtime = StandInRuntime()
    e = enforcer(tmp_path, runtime)
    cid = create(e, runtime, "vanishing", guaranteed("1"))
    e.observed([], complete=True, asked_at=e.sequence)
    assert all(t.container_id != cid for t in e.registry.entries.values())
    assert not e.policy.taken


def test_a_listing_adopts_a_live_container_nobody_announced(tmp_path: Path) -> None:
    runtime = StandInRuntime()
    e = enforcer(tmp_path, runtime)
    create_value = create_of("stray", guaranteed("1"))
    key = f"{create_value.pod_uid}/{create_value.container}"
    runtime.add("cid-stray", key)
    runtime.cpus["cid-stray"] = "2"
    runtime.recorded_creates["cid-stray"] = Recorded(create_value, KubeletRecord(), "2", "")
    assert e.unknown(runtime.list_containers())
    e.observed(runtime.list_containers(), complete=True, asked_at=e.sequence)
    assert e.policy.placement(key).exclusive == CPUSet.of(2)


def test_in_place_resize_is_placed_anew(tmp_path: Path) -> None:
    from enforcer.decode import KubeletResources

    runtime = StandInRuntime()
    e = enforcer(tmp_path, runtime)
    cid = create(e, runtime, "grow", guaranteed("1"))
    kubelet = KubeletResources(
        cpu_period=100000, cpu_quota=200000, cpu_shares=2048, memory_limit=64 << 20
    )
    pinning = e.update(cid, kubelet, KubeletRecord())
    assert pinning is not None
    assert len(e.policy.taken) == 2
    assert CPUSet.parse(pinning.cpus) == e.policy.taken


def test_a_cpuset_only_update_is_not_a_resize(tmp_path: Path) -> None:
    """kubelet's CPU manager (static) reconciles with an UpdateContainerResources carrying
    nothing but its cpuset: no shares, quota or memory (0, "unchanged"). That is no resize to
    0 CPUs: the container keeps its exclusive CPU, and the update carries the enforcer's."""
    from enforcer.decode import KubeletResources

    runtime = StandInRuntime()
    e = enforcer(tmp_path, runtime)
    cid = create(e, runtime, "held", guaranteed("1"))
    before = e.policy.taken
    assert len(before) == 1
    pinning = e.update(cid, KubeletResources(cpuset_cpus="0-3"), KubeletRecord())
    assert pinning is not None and CPUSet.parse(pinning.cpus) == before
    assert e.policy.taken == before


def test_a_failed_state_write_rolls_the_admission_back_and_names_the_file(
    tmp_path: Path,
) -> None:
    runtime = StandInRuntime()
    e = enforcer(tmp_path, runtime)
    holder = create(e, runtime, "holder", guaranteed("1"))
    store = e.registry.store
    assert isinstance(store, FailingStore)
    store.fail = OSError(28, "No space left on device")
    with pytest.raises(Refusal) as err:
        admit(e, "unlucky", guaranteed("1"))
    assert err.value.reason is Reason.UNAVAILABLE
    assert str(store.path) in str(err.value) and "No space left on device" in str(err.value)
    # Nothing of the refused admission is left: the CPU it would have had is still free.
    assert len(e.policy.admitted) == 1 and len(e.registry.entries) == 1
    assert len(e.policy.taken) == 1
    store.fail = None
    admit(e, "unlucky", guaranteed("1"))
    assert len(e.policy.taken) == 2
    assert e.registry.by_container(holder) is not None


def test_a_failed_state_write_keeps_a_release_held(tmp_path: Path) -> None:
    runtime = StandInRuntime()
    e = enforcer(tmp_path, runtime)
    cid = create(e, runtime, "going", guaranteed("1"))
    store = e.registry.store
    assert isinstance(store, FailingStore)
    store.fail = PermissionError(30, "Read-only file system")
    e.container_gone(cid, "stopped")
    assert e.registry.by_container(cid) is not None  # safe: its CPU stays held
    store.fail = None
    del runtime.containers[cid]
    e.observed([], complete=True, asked_at=e.sequence)
    assert e.registry.by_container(cid) is None and not e.policy.taken


def test_a_drifted_cpuset_is_repaired(tmp_path: Path) -> None:
    runtime = StandInRuntime()
    e = enforcer(tmp_path, runtime)
    create(e, runtime, "holder", guaranteed("1"))
    shared = create(e, runtime, "sharer")
    wanted = runtime.cpus[shared]
    runtime.cpus[shared] = "0-3"  # written behind the enforcer's back
    e.sweep()
    assert runtime.cpus[shared] == wanted
    assert e.metrics.repairs._value.get() == 1


def test_a_cpuset_that_cannot_be_repaired_is_reported(tmp_path: Path) -> None:
    runtime = StandInRuntime()
    e = enforcer(tmp_path, runtime)
    create(e, runtime, "holder", guaranteed("1"))
    shared = create(e, runtime, "sharer")
    runtime.cpus[shared] = "0-3"
    runtime.ignore_updates = True
    e.sweep()
    row = next(v for v in e.views() if v.pod == "sharer")
    assert row.problem is not None and "cannot repair" in row.problem
    assert e.metrics.unrepaired._value.get() == 1


def test_a_running_container_that_no_longer_fits_moves_to_the_shared_pool(
    tmp_path: Path,
) -> None:
    runtime = StandInRuntime()
    e = enforcer(tmp_path, runtime)
    cid = create(e, runtime, "holder", guaranteed("3"))  # CPUs 1-3: all but the reserved one
    # Restarted with CPU 1 reserved as well: three exclusive CPUs no longer fit.
    config = parse_config({"policy": {"name": "static", "reservedCPUs": "0-1"}})
    again = enforcer(tmp_path, runtime, config, reconciled=False)
    again.restore_saved()
    again.reconcile()
    entry = again.registry.by_container(cid)
    assert entry is not None  # still tracked
    assert again.policy.placement(entry.key).kind == "shared"
    assert runtime.cpus[cid] == "0-3"  # moved before any other container is placed


TOPOLOGY_AWARE = parse_config({"policy": {"name": "topology-aware", "reservedCPUs": "0"}})


def test_a_running_container_the_new_configuration_cannot_place_keeps_its_cpus(
    tmp_path: Path,
) -> None:
    runtime = StandInRuntime()
    e = enforcer(tmp_path, runtime, TOPOLOGY_AWARE)
    cid = create(e, runtime, "holder", guaranteed("2"))
    held = CPUSet.parse(runtime.cpus[cid])
    # Restarted with only CPUs 0-1 available: two exclusive CPUs no longer fit, nor do two
    # CPUs' worth of requests on the one shared CPU.
    config = parse_config(
        {"policy": {"name": "topology-aware", "reservedCPUs": "0", "availableCPUs": "0-1"}}
    )
    again = enforcer(tmp_path, runtime, config, reconciled=False)
    again.restore_saved()
    again.reconcile()
    entry = again.registry.by_container(cid)
    assert entry is not None and entry.unplaced is not None  # tracked, and said why
    assert again.policy.placement(entry.key).kind == "held"
    row = next(v for v in again.views() if v.container_id == cid)
    assert row.problem is not None and "cannot place" in row.problem
    assert again.policy.taken >= held  # nobody else gets its CPUs
    assert runtime.cpus[cid] == str(held)  # left where it runs
    with pytest.raises(Refusal):
        admit(again, "newcomer", guaranteed("1"))
    assert again.metrics.held._value.get() == 1
    # Once it ends, its CPUs are free again.
    del runtime.containers[cid]
    again.observed([], complete=True, asked_at=again.sequence)
    assert not again.policy.taken and again.registry.by_container(cid) is None


def test_state_of_another_shape_is_moved_aside_not_fatal(tmp_path: Path) -> None:
    runtime = StandInRuntime()
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / "state.json").write_text(json.dumps({"version": 1, "policy": {"admitted": [{}]}}))
    e = enforcer(tmp_path, runtime)
    e.restore_saved()
    assert not e.policy.admitted


def test_status_never_moves_the_state_file(tmp_path: Path) -> None:
    from enforcer.commands.status import status

    (tmp_path / "state.json").write_text(json.dumps({"version": 3}))
    assert status(str(tmp_path)) == 1
    assert (tmp_path / "state.json").exists()


def test_an_enforcer_not_in_charge_refuses_to_decide(tmp_path: Path) -> None:
    runtime = StandInRuntime()
    e = enforcer(tmp_path, runtime)
    e.not_in_charge = "the enforcer is stopping before it took over the node"
    with pytest.raises(Refusal) as err:
        admit(e, "late", guaranteed("1"))
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


def test_a_reconfiguration_whose_state_cannot_be_written_changes_nothing(
    tmp_path: Path,
) -> None:
    runtime = StandInRuntime()
    e = enforcer(tmp_path, runtime)
    holder = create(e, runtime, "holder", guaranteed("2"))
    before = runtime.cpus[holder]
    store = e.registry.store
    assert isinstance(store, FailingStore)
    store.fail = OSError(5, "Input/output error")
    with pytest.raises(StateWriteFailed):
        e.reconfigure(parse_config({"policy": {"name": "static", "reservedCPUs": before}}))
    assert e.config is CONFIG and runtime.cpus[holder] == before
    assert str(e.policy.placement(e.registry.by_container(holder).key).exclusive) == before  # type: ignore[union-attr]


def test_a_refused_creation_whose_release_cannot_be_written_is_released_later(
    tmp_path: Path,
) -> None:
    runtime = StandInRuntime()
    clock = Clock()
    e = enforcer(tmp_path, runtime, clock=clock)
    key, _ = admit(e, "refused", guaranteed("1"))
    store = e.registry.store
    assert isinstance(store, FailingStore)
    store.fail = OSError(28, "No space left on device")
    e.create_failed(key, uncertain=False, details="image not found")
    assert key in e.policy.admitted  # the release could not be written: still held
    store.fail = None
    clock.now += 11
    e.maintain()
    assert key not in e.policy.admitted and not e.policy.taken


def test_two_attempts_of_one_container_are_two_containers(tmp_path: Path) -> None:
    # A cut-off attempt 0 may still be made (and run) beside kubelet's attempt 1: releasing
    # one must not drop the other, whose CPUs would then look free.
    from dataclasses import replace

    runtime = StandInRuntime()
    e = enforcer(tmp_path, runtime)
    first = create_of("twice", guaranteed("1"))
    key0, _ = e.create(first, sandbox_id="sandbox", resources=KubeletRecord())
    key1, pinning1 = e.create(
        replace(first, attempt=1), sandbox_id="sandbox", resources=KubeletRecord()
    )
    assert key0 != key1
    runtime.add("cid-1", key1)
    runtime.cpus["cid-1"] = pinning1.cpus
    e.created(key1, "cid-1")
    e.create_failed(key0, uncertain=False, details="name already reserved")
    assert e.registry.by_container("cid-1") is not None
    assert e.policy.placement(key1).exclusive == CPUSet.parse(pinning1.cpus)
