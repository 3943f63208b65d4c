"""The plugin's unsolicited UpdateContainers wait for a quiet runtime: never while one of the
runtime's requests is in flight at the plugin, never sooner than the quiet period after the
last one (CRI-O 1.34.0 deadlocks when a plugin's UpdateContainers meets a container start's
PostStartContainer: enforcer.nri.update_sender); and once quiet, they go out."""

from __future__ import annotations

import asyncio
import time

from enforcer.nri.update_sender import UpdateSender
from enforcer.nriapi import api_pb2

QUIET = 0.3


class Runtime:
    """The queue of NriRuntime as the sender sees it."""

    def __init__(self) -> None:
        self.queued: list[api_pb2.ContainerUpdate] = []
        self.confirmed_ids: list[str] = []

    def take_updates(self) -> list[api_pb2.ContainerUpdate]:
        taken, self.queued = self.queued, []
        return taken

    def confirmed(self, ids: object) -> None:
        self.confirmed_ids += list(ids)  # type: ignore[call-overload]


class Connection:
    """Records when UpdateContainers arrives, and with what."""

    def __init__(self) -> None:
        self.closed = asyncio.Event()
        self.calls: list[tuple[float, api_pb2.UpdateContainersRequest]] = []
        self.arrived = asyncio.Event()

    async def call(self, service: str, method: str, payload: bytes, timeout: float) -> bytes:
        assert method == "UpdateContainers"
        self.calls.append((time.monotonic(), api_pb2.UpdateContainersRequest.FromString(payload)))
        self.arrived.set()
        return api_pb2.UpdateContainersResponse().SerializeToString()


async def finish(sender: UpdateSender, connection: Connection, task: asyncio.Task[None]) -> None:
    """The connection closes: the sender's loop ends."""
    connection.closed.set()
    sender.work.set()
    await asyncio.wait_for(task, 30)


def update(cid: str) -> api_pb2.ContainerUpdate:
    u = api_pb2.ContainerUpdate(container_id=cid)
    u.linux.resources.cpu.cpus = "0"
    return u


def test_updates_wait_for_the_runtimes_requests_and_a_quiet_period() -> None:
    async def scenario() -> None:
        runtime, connection = Runtime(), Connection()
        swept: list[bool] = []
        sender = UpdateSender(runtime, lambda *a: None, lambda: swept.append(True), QUIET)  # type: ignore[arg-type]
        release = asyncio.Event()

        finished: list[float] = []

        async def start_container(payload: bytes) -> bytes:  # a request the runtime waits on
            await release.wait()
            finished.append(time.monotonic())  # before the sender counts it answered
            return b""

        task = asyncio.create_task(sender.run(connection))  # type: ignore[arg-type]
        serving = asyncio.create_task(sender.serving(start_container)(b""))
        await asyncio.sleep(0)
        runtime.queued.append(update("a"))
        sender.work.set()
        await asyncio.sleep(3 * QUIET)
        assert connection.calls == []  # the runtime's request is still in flight
        release.set()
        await serving
        await asyncio.wait_for(connection.arrived.wait(), 30)
        sent_at, request = connection.calls[0]
        assert sent_at - finished[0] >= QUIET  # not before the quiet period
        assert [u.container_id for u in request.update] == ["a"]
        assert runtime.confirmed_ids == ["a"] and swept == [True]
        await finish(sender, connection, task)

    asyncio.run(scenario())


def test_a_request_in_the_quiet_period_starts_it_again() -> None:
    async def scenario() -> None:
        runtime, connection = Runtime(), Connection()
        sender = UpdateSender(runtime, lambda *a: None, lambda: None, QUIET)  # type: ignore[arg-type]

        seen: list[float] = []

        async def event(payload: bytes) -> bytes:
            seen.append(time.monotonic())  # before the sender counts it answered
            return b""

        task = asyncio.create_task(sender.run(connection))  # type: ignore[arg-type]
        await sender.serving(event)(b"")
        runtime.queued.append(update("b"))
        sender.work.set()
        await asyncio.sleep(QUIET / 2)
        await sender.serving(event)(b"")  # another event: the quiet starts over
        await asyncio.wait_for(connection.arrived.wait(), 30)
        assert connection.calls[0][0] - seen[-1] >= QUIET
        await finish(sender, connection, task)

    asyncio.run(scenario())


def test_a_container_between_start_and_post_start_holds_updates_back() -> None:
    async def scenario() -> None:
        runtime, connection = Runtime(), Connection()
        sender = UpdateSender(runtime, lambda *a: None, lambda: None, QUIET)  # type: ignore[arg-type]
        task = asyncio.create_task(sender.run(connection))  # type: ignore[arg-type]
        sender.opened("starting")  # StartContainer answered: runc starts it, PostStart follows
        runtime.queued.append(update("c"))
        sender.work.set()
        await asyncio.sleep(3 * QUIET)
        assert connection.calls == []  # the runtime is between the two halves of the start
        closed_at = time.monotonic()
        sender.closed("starting")  # PostStartContainer came
        await asyncio.wait_for(connection.arrived.wait(), 30)
        assert [u.container_id for u in connection.calls[0][1].update] == ["c"]
        assert connection.calls[0][0] >= closed_at
        await finish(sender, connection, task)

    asyncio.run(scenario())
