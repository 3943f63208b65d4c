"""The plugin is never left out for good: the session against a runtime written here that
behaves as containerd 1.7 does when a Synchronize fails (it answers RegisterPlugin, then keeps
the connection open and sends nothing more). A connection not synchronized in time, or whose
Synchronize failed, is closed and the plugin registers again; a synchronized one is kept. The
real containerd 1.7 is in test_nri_left_out.py."""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from pathlib import Path

from enforcer.nri.connection import RESOURCE_EXHAUSTED, UNKNOWN, NriConnection, TtrpcError
from enforcer.nri.frames import (
    PLUGIN_CONN,
    REQUEST,
    RESPONSE,
    RUNTIME_CONN,
    Message,
    MuxReader,
    TtrpcReader,
    mux_frames,
    ttrpc_message,
)
from enforcer.nri.session import PLUGIN_SERVICE, Session, plugin_method
from enforcer.nriapi import api_pb2, request_pb2

SYNC = plugin_method("Synchronize")


class Runtime:
    """The runtime's side of NRI on a unix socket: answers RegisterPlugin, then sends a
    Synchronize when ``synchronize(n)`` says so for the n-th registration (from 1), records
    the status of each answer, and otherwise sends nothing."""

    def __init__(self, synchronize=lambda n: True) -> None:
        self.synchronize = synchronize
        self.registrations = 0
        self.answers: list[tuple[int, int]] = []  # (registration, status code)
        self.closed: list[int] = []  # registrations whose connection the plugin closed

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        mux, streams = MuxReader(), {PLUGIN_CONN: TtrpcReader(), RUNTIME_CONN: TtrpcReader()}
        pending: list[tuple[int, Message]] = []
        n = 0

        async def next_message() -> tuple[int, Message] | None:
            while not pending:
                data = await reader.read(65536)
                if not data:
                    return None
                for conn, payload in mux.feed(data):
                    pending.extend((conn, m) for m in streams[conn].feed(payload))
            return pending.pop(0)

        while (got := await next_message()) is not None:
            conn, message = got
            if conn == RUNTIME_CONN and message.kind == REQUEST:  # RegisterPlugin
                self.registrations += 1
                n = self.registrations
                ok = request_pb2.Response(payload=api_pb2.Empty().SerializeToString())
                reply = ttrpc_message(message.stream_id, RESPONSE, ok.SerializeToString())
                writer.write(mux_frames(RUNTIME_CONN, reply))
                if self.synchronize(n):
                    body = request_pb2.Request(
                        service=PLUGIN_SERVICE,
                        method="Synchronize",
                        payload=api_pb2.SynchronizeRequest().SerializeToString(),
                    )
                    request = ttrpc_message(1, REQUEST, body.SerializeToString())
                    writer.write(mux_frames(PLUGIN_CONN, request))
                await writer.drain()
            elif conn == PLUGIN_CONN and message.kind == RESPONSE:
                assert message.body is not None
                self.answers.append((n, request_pb2.Response.FromString(message.body).status.code))
        self.closed.append(n)
        writer.close()


async def wait_until(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


async def answer_synchronize(payload: bytes) -> bytes:
    api_pb2.SynchronizeRequest.FromString(payload)
    return api_pb2.SynchronizeResponse().SerializeToString()


def run_session(tmp_path: Path, runtime: Runtime, handlers, scenario) -> Session:
    async def main() -> Session:
        path = str(tmp_path / "nri.sock")
        server = await asyncio.start_unix_server(runtime.serve, path)
        session = Session(path, "test", "90", handlers, sync_seconds=0.3)
        stop = asyncio.Event()
        task = asyncio.create_task(session.run(stop))
        try:
            await scenario(session)
        finally:
            stop.set()
            await task
            server.close()
        return session

    return asyncio.run(main())


def test_a_connection_the_runtime_never_synchronizes_is_closed_and_registered_again(
    tmp_path: Path,
) -> None:
    runtime = Runtime(synchronize=lambda n: False)  # containerd after a failed Synchronize

    async def scenario(session: Session) -> None:
        await wait_until(lambda: runtime.registrations >= 3)
        await wait_until(lambda: runtime.closed[:2] == [1, 2])

    session = run_session(tmp_path, runtime, {SYNC: answer_synchronize}, scenario)
    assert session.left_out >= 2
    assert not session.synchronized.is_set()


def test_a_failed_synchronize_closes_the_connection_and_a_synchronized_one_is_kept(
    tmp_path: Path,
) -> None:
    runtime = Runtime()
    calls: list[int] = []

    async def synchronize(payload: bytes) -> bytes:
        calls.append(1)
        if len(calls) == 1:
            raise TtrpcError(UNKNOWN, "cannot read the saved state")
        return await answer_synchronize(payload)

    async def scenario(session: Session) -> None:
        await wait_until(session.synchronized.is_set)
        # Synchronized: kept well past the deadline (a second registration would show).
        await asyncio.sleep(3 * session.sync_seconds)
        assert runtime.registrations == 2
        assert session.connection is not None and not session.connection.closed.is_set()

    session = run_session(tmp_path, runtime, {SYNC: synchronize}, scenario)
    # The failed answer reached the runtime, then the plugin closed that connection.
    assert runtime.answers == [(1, UNKNOWN), (2, 0)]
    assert runtime.closed[0] == 1
    assert session.left_out == 0  # closed at once, not by the deadline


def test_an_oversized_request_closes_the_connection_only_before_it_is_synchronized() -> None:
    async def exchange(synchronized_first: bool) -> tuple[int, bool]:
        ours, theirs = socket.socketpair()
        theirs.setblocking(False)
        reader, writer = await asyncio.open_unix_connection(sock=ours)
        connection = NriConnection(
            reader, writer, {SYNC: answer_synchronize}, max_request=1000, vital=[SYNC]
        )
        connection.start()
        loop = asyncio.get_running_loop()
        mux, stream = MuxReader(), TtrpcReader()

        async def answer() -> request_pb2.Response:
            while True:
                data = await loop.sock_recv(theirs, 65536)
                assert data
                for _, payload in mux.feed(data):
                    for message in stream.feed(payload):
                        return request_pb2.Response.FromString(message.body)

        if synchronized_first:
            body = request_pb2.Request(service=PLUGIN_SERVICE, method="Synchronize", payload=b"")
            sync = ttrpc_message(1, REQUEST, body.SerializeToString())
            await loop.sock_sendall(theirs, mux_frames(PLUGIN_CONN, sync))
            assert (await answer()).status.code == 0
        big = struct.pack(">IIBB", 5000, 3, REQUEST, 0) + b"x" * 5000
        await loop.sock_sendall(theirs, mux_frames(PLUGIN_CONN, big))
        code = (await answer()).status.code
        if not synchronized_first:
            await asyncio.wait_for(connection.closed.wait(), 10)
            assert "left out" in connection.close_reason
        else:
            await asyncio.sleep(0.3)
        closed = connection.closed.is_set()
        connection.close()
        theirs.close()
        return code, closed

    assert asyncio.run(exchange(False)) == (RESOURCE_EXHAUSTED, True)
    assert asyncio.run(exchange(True)) == (RESOURCE_EXHAUSTED, False)


def test_a_synchronize_answer_over_what_the_runtime_reads_closes_the_connection() -> None:
    async def too_big(payload: bytes) -> bytes:
        return b"x" * (5 << 20)  # over ttrpc's 4 MiB: the runtime could not read it

    async def main() -> tuple[int, str]:
        ours, theirs = socket.socketpair()
        theirs.setblocking(False)
        reader, writer = await asyncio.open_unix_connection(sock=ours)
        connection = NriConnection(reader, writer, {SYNC: too_big}, vital=[SYNC])
        connection.start()
        loop = asyncio.get_running_loop()
        body = request_pb2.Request(service=PLUGIN_SERVICE, method="Synchronize", payload=b"")
        sync = ttrpc_message(1, REQUEST, body.SerializeToString())
        await loop.sock_sendall(theirs, mux_frames(PLUGIN_CONN, sync))
        mux, stream, answers = MuxReader(), TtrpcReader(), []
        while not answers:
            data = await loop.sock_recv(theirs, 65536)
            assert data
            for _, payload in mux.feed(data):
                answers += stream.feed(payload)
        await asyncio.wait_for(connection.closed.wait(), 10)
        theirs.close()
        return request_pb2.Response.FromString(answers[0].body).status.code, connection.close_reason

    code, reason = asyncio.run(main())
    assert code == RESOURCE_EXHAUSTED
    assert reason.startswith("left out by the runtime: Synchronize failed")
