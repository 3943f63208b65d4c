"""The NRI adapter over the real engine, driven with NRI messages as containerd 1.7 sends them
(no runtime needed): answers in time or degrades, refusals map to the relay's codes,
Synchronize answers with the updates that move unknown containers off exclusive CPUs, and
re-pins wait for the runtime before their cgroups are read."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from enforcer.configuration import parse_config
from enforcer.controllers.cpuset import CpusetController
from enforcer.controllers.group import Controllers
from enforcer.engine import Enforcer
from enforcer.nri.connection import TtrpcError
from enforcer.nri.plugin import NriPlugin
from enforcer.nri.protocol import Offer
from enforcer.nri.runtime import NriRuntime, PendingCpusets
from enforcer.nriapi import api_pb2
from enforcer.state import StateStore
from enforcer.state import store as store_module
from enforcer.topology import Topology
from enforcer.worker import EngineWorker

MACHINE = Topology.synthetic(sockets=1, cores_per_node=4, threads_per_core=1)  # CPUs 0-3
CONFIG = parse_config({"policy": {"name": "static", "reservedCPUs": "0"}})


class Kernel:
    """cpusets as the kernel would show them: what the runtime last applied."""

    def __init__(self) -> None:
        self.cpus: dict[str, str] = {}

    def read(self, cgroup_parent: str, container_id: str) -> tuple[str, str] | None:
        found = self.cpus.get(container_id)
        return (found, "0") if found is not None else None


def pod(name: str, qos_dir: str = "") -> api_pb2.PodSandbox:
    uid = f"uid-{name}"
    parent = f"/kubepods/{qos_dir + '/' if qos_dir else ''}pod{uid}"
    p = api_pb2.PodSandbox(id=f"sb-{name}", name=name, uid=uid, namespace="nri-unit")
    p.linux.cgroup_parent = parent
    return p


def container(name: str, cpu_milli: int = 0, cpus: str = "", state: int = 0) -> api_pb2.Container:
    c = api_pb2.Container(id=f"c-{name}", pod_sandbox_id=f"sb-{name}", name="app", state=state)
    c.annotations["io.kubernetes.container.restartCount"] = "0"
    cpu = c.linux.resources.cpu
    cpu.shares.value = max(2, cpu_milli * 1024 // 1000)
    if cpu_milli:
        cpu.quota.value = cpu_milli * 100
        cpu.period.value = 100000
        c.linux.resources.memory.limit.value = 64 << 20
    cpu.cpus = cpus
    return c


def create_request(name: str, cpu_milli: int = 0) -> bytes:
    qos = "" if cpu_milli else "besteffort"
    return api_pb2.CreateContainerRequest(
        pod=pod(name, qos), container=container(name, cpu_milli)
    ).SerializeToString()


@pytest.fixture
def parts(tmp_path: Path):
    runtime = NriRuntime()
    kernel = Kernel()
    store = StateStore(tmp_path / "state")
    store.ensure_dir()
    enforcer = Enforcer(
        topology=MACHINE,
        config=CONFIG,
        store=store,
        runtime=runtime,
        controllers=Controllers([CpusetController(PendingCpusets(kernel, runtime))]),
    )

    def reconcile() -> bool:
        enforcer.reconcile()
        return True

    plugin = NriPlugin(EngineWorker(enforcer), runtime, reconcile=reconcile, answer_seconds=0.3)
    yield plugin, runtime, kernel, enforcer
    plugin.worker.close()


def synchronize(plugin: NriPlugin, pods=(), containers=()) -> api_pb2.SynchronizeResponse:
    request = api_pb2.SynchronizeRequest(pods=list(pods), containers=list(containers))
    return api_pb2.SynchronizeResponse.FromString(
        asyncio.run(plugin.synchronize(request.SerializeToString()))
    )


def test_configure_subscribes_to_what_the_engine_needs(parts) -> None:
    plugin = parts[0]
    answer = asyncio.run(plugin.configure(api_pb2.ConfigureRequest().SerializeToString()))
    events = api_pb2.ConfigureResponse.FromString(answer).events
    # A runtime that names no NRI version (1.7): only what v0.6.1 accepts (bits over 0x7ff
    # make its Configure fail).
    assert events == Offer().event_mask and events & ~0x7FF == 0
    for event in ("CREATE_CONTAINER", "POST_CREATE_CONTAINER", "UPDATE_CONTAINER",
                  "STOP_CONTAINER", "REMOVE_CONTAINER", "START_CONTAINER", "STOP_POD_SANDBOX",
                  "REMOVE_POD_SANDBOX"):  # fmt: skip
        assert events & (1 << (api_pb2.Event.Value(event) - 1)), event


def test_create_answers_the_adjustment_and_refuses_as_the_relay(parts) -> None:
    plugin, *_ = parts
    synchronize(plugin)

    async def main() -> None:
        adjust = api_pb2.CreateContainerResponse.FromString(
            await plugin.create_container(create_request("g1", 1000))
        ).adjust
        assert adjust.linux.resources.cpu.cpus == "1"
        # CPUs 1-3 are free, 0 reserved: two more fit, the fourth does not.
        for name in ("g2", "g3"):
            await plugin.create_container(create_request(name, 1000))
        with pytest.raises(TtrpcError) as refused:
            await plugin.create_container(create_request("g4", 1000))
        assert refused.value.code == 8  # RESOURCE_EXHAUSTED, as the relay answers
        assert "exclusive" in refused.value.message

    asyncio.run(main())


def test_post_create_is_acknowledged_once_the_decision_is_on_the_disk(
    parts, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CreateContainer is answered once the decision is in the state journal; containerd
    answers kubelet only after PostCreateContainer, which waits for the journal's fsync (run
    while containerd creates the container)."""
    plugin, _, _, enforcer = parts
    synchronize(plugin)
    store = enforcer.registry.store
    assert store is not None
    real = os.fdatasync

    def slow(fd: int) -> None:  # a slow disk
        time.sleep(0.2)
        real(fd)

    monkeypatch.setattr(store_module.os, "fdatasync", slow)

    async def main() -> tuple[float, float, bool]:
        started = time.monotonic()
        await plugin.create_container(create_request("g1", 1000))
        answered = time.monotonic() - started
        unsynced_at_answer = store.unsynced
        event = api_pb2.StateChangeEvent(
            event=api_pb2.Event.POST_CREATE_CONTAINER, pod=pod("g1"), container=container("g1")
        )
        await plugin.state_change(event.SerializeToString())
        return answered, time.monotonic() - started, unsynced_at_answer

    answered, acknowledged, unsynced_at_answer = asyncio.run(main())
    assert unsynced_at_answer and answered < 0.2  # the fsync is not on the adjustment's path
    assert not store.unsynced and acknowledged >= 0.2  # ...but before kubelet's answer
    assert "c-g1" in {e.container_id for e in enforcer.registry.entries.values()}


def test_a_busy_engine_gets_the_create_refused_in_time_and_released_after(parts) -> None:
    plugin, _, _, enforcer = parts
    synchronize(plugin)

    async def main() -> float:
        plugin.worker.submit(time.sleep, 1.0)  # the worker is busy (a slow state write, say)
        started = time.monotonic()
        with pytest.raises(TtrpcError) as late:
            await plugin.create_container(create_request("slow", 1000))
        took = time.monotonic() - started
        assert late.value.code == 14  # UNAVAILABLE: kubelet retries
        await plugin.worker.run(lambda: None)  # the late admission and its release are done
        return took

    took = asyncio.run(main())
    assert took < 0.6  # within the plugin's own deadline, far inside containerd's 2 s
    assert enforcer.registry.by_container("c-slow") is None  # nothing held for it
    assert not enforcer.policy.taken


def test_a_late_synchronize_is_answered_in_time_and_finished_after(parts) -> None:
    plugin, runtime, kernel, _ = parts
    synchronize(plugin)
    asyncio.run(plugin.create_container(create_request("g1", 1000)))
    kernel.cpus["c-g1"] = "1"
    runtime.disconnected()  # the plugin reconnects: a new Synchronize, with a stranger
    plugin.reconcile_failed = "not connected to the runtime"
    g1 = container("g1", 1000, cpus="1", state=api_pb2.CONTAINER_RUNNING)
    stranger = container("be", cpus="0-3", state=api_pb2.CONTAINER_RUNNING)
    kernel.cpus["c-be"] = "0-3"
    request = api_pb2.SynchronizeRequest(pods=[pod("g1"), pod("be", "besteffort")])
    request.containers.extend([g1, stranger])

    async def main() -> tuple[float, api_pb2.SynchronizeResponse, str | None]:
        plugin.worker.submit(time.sleep, 1.0)  # the worker is busy (a slow state write, say)
        started = time.monotonic()
        answer = await plugin.synchronize(request.SerializeToString())
        took = time.monotonic() - started
        health_meanwhile = plugin.reconcile_failed
        await plugin.worker.run(lambda: None)  # the late reconciliation is done
        await asyncio.sleep(0)
        return took, api_pb2.SynchronizeResponse.FromString(answer), health_meanwhile

    took, answer, meanwhile = asyncio.run(main())
    assert took < 0.6 and not answer.update  # answered within the plugin's own deadline
    assert meanwhile is not None  # not ready while the reconciliation is unfinished
    # Finished after: ready again, and the stranger's re-pin waits for the sender.
    assert plugin.reconcile_failed is None
    assert {u.container_id: u.linux.resources.cpu.cpus for u in runtime.take_updates()} == {
        "c-be": "0,2-3"
    }


def test_synchronize_moves_an_unknown_container_off_the_exclusive_cpu(parts) -> None:
    plugin, runtime, kernel, enforcer = parts
    synchronize(plugin)
    asyncio.run(plugin.create_container(create_request("g1", 1000)))
    kernel.cpus["c-g1"] = "1"
    # The plugin restarts (its picture is gone); meanwhile a BestEffort container started
    # unadjusted on every CPU.
    runtime.disconnected()
    stranger = container("be", cpus="0-3", state=api_pb2.CONTAINER_RUNNING)
    kernel.cpus["c-be"] = "0-3"
    g1 = container("g1", 1000, cpus="1", state=api_pb2.CONTAINER_RUNNING)
    answer = synchronize(plugin, [pod("g1"), pod("be", "besteffort")], [g1, stranger])
    updates = {u.container_id: u.linux.resources.cpu.cpus for u in answer.update}
    assert updates == {"c-be": "0,2-3"}
    # Until the runtime has applied it, its cgroup is not judged; after, it is.
    assert "c-be" in runtime.unconfirmed
    kernel.cpus["c-be"] = "0,2-3"
    runtime.confirmed(["c-be"])
    # Verified on the engine's worker, where the plugin runs it (a call from another thread
    # while the worker holds the engine is refused: enforcer.engine.thread).
    assert asyncio.run(plugin.worker.run(enforcer.verify, enforcer.registry.by_container("c-be")))


def test_stop_releases_and_answers_the_widened_containers(parts) -> None:
    plugin = parts[0]
    be = container("be", state=api_pb2.CONTAINER_RUNNING)
    synchronize(plugin, [pod("be", "besteffort")], [be])

    async def main() -> api_pb2.StopContainerResponse:
        created = api_pb2.CreateContainerResponse.FromString(
            await plugin.create_container(create_request("g1", 1000))
        )
        # The shared container is narrowed in the same answer.
        assert {u.container_id: u.linux.resources.cpu.cpus for u in created.update} == {
            "c-be": "0,2-3"
        }
        stop = api_pb2.StopContainerRequest(pod=pod("g1"), container=container("g1", 1000))
        return api_pb2.StopContainerResponse.FromString(
            await plugin.stop_container(stop.SerializeToString())
        )

    stopped = asyncio.run(main())
    assert {u.container_id: u.linux.resources.cpu.cpus for u in stopped.update} == {"c-be": "0-3"}


def test_the_state_keeps_kubelets_resources_as_the_relay_does() -> None:
    """A state folder moves between the modes: the NRI plugin records kubelet's resources as
    the neutral record the relay keeps too, which the relay's re-pins send back."""
    from enforcer.cri import api_pb2 as cri
    from enforcer.cri.convert import record_of as relay_record
    from enforcer.cri.convert import resources_message
    from enforcer.nri.convert import record_of

    nri = container("g", 1500, cpus="1-2").linux.resources
    nri.cpu.mems = "0"
    same = cri.LinuxContainerResources(
        cpu_period=100000, cpu_quota=150000, cpu_shares=1536,
        memory_limit_in_bytes=64 << 20, cpuset_cpus="1-2", cpuset_mems="0",
    )  # fmt: skip
    assert record_of(nri) == relay_record(same)
    assert resources_message(record_of(nri)) == same


def test_the_nri_daemon_verifies_cpusets_through_the_pending_reader(tmp_path: Path) -> None:
    """The NRI transport gives the controllers its reader when they are built (no reader is
    swapped afterwards): a container whose update the runtime has not applied is not read."""
    from enforcer.app.nri import NriTransport
    from enforcer.controllers.base import Roots
    from enforcer.controllers.registry import node_controllers
    from enforcer.options import RunOptions

    transport = NriTransport(RunOptions(state_dir=str(tmp_path)), 0.0)
    controllers = node_controllers(Roots(cgroupfs=str(tmp_path)), MACHINE, transport.cpuset_reader)
    cpuset = controllers.get("cpuset")
    assert isinstance(cpuset, CpusetController)
    reader = cpuset.reader
    assert isinstance(reader, PendingCpusets) and reader.runtime is transport.nri_runtime
    transport.nri_runtime.unconfirmed.add("c-1")
    assert reader.read("/kubepods/podx", "c-1") is None
