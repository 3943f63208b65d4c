"""The hand-written NRI transport: multiplexer and ttrpc framing (split, packed, bounded),
the connection's server and client sides over a socket pair, and registration with a real
containerd 1.7 (Configure, Synchronize and CreateContainer arrive; the plugin answers)."""

from __future__ import annotations

import asyncio
import socket
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from enforcer.nri.connection import UNIMPLEMENTED, NriConnection, TtrpcError
from enforcer.nri.frames import (
    MUX_HEADER,
    PLUGIN_CONN,
    REQUEST,
    RESPONSE,
    RUNTIME_CONN,
    WRITE_CHUNK,
    MuxReader,
    ProtocolError,
    TtrpcReader,
    mux_frames,
    ttrpc_message,
)
from enforcer.nri.session import PLUGIN_SERVICE, RUNTIME_SERVICE, Session, plugin_method
from enforcer.nriapi import api_pb2, request_pb2
from tests.support.kubelet import KubeletEmulator
from tests.support.pods import manifest, sleeper
from tests.support.runtimes import NriContainerd

# -- framing ------------------------------------------------------------------------------------


def test_a_message_is_written_in_frames_of_at_most_4_kib_none_spanning_two() -> None:
    message = ttrpc_message(3, REQUEST, b"x" * 10_000)
    wire = mux_frames(RUNTIME_CONN, message)
    frames = MuxReader().feed(wire)
    assert [len(p) for _, p in frames] == [WRITE_CHUNK, WRITE_CHUNK, len(message) - 2 * WRITE_CHUNK]
    assert {conn for conn, _ in frames} == {RUNTIME_CONN}
    assert b"".join(p for _, p in frames) == message
    assert mux_frames(PLUGIN_CONN, b"") == MUX_HEADER.pack(PLUGIN_CONN, 0)


@given(
    bodies=st.lists(st.binary(max_size=3000), min_size=1, max_size=6),
    cuts=st.lists(st.integers(min_value=1, max_value=700), max_size=40),
)
def test_messages_survive_any_split_and_packing(bodies: list[bytes], cuts: list[int]) -> None:
    """A logical connection is a byte stream: messages split across frames, several in one
    frame, and the socket's reads cut anywhere."""
    stream = b"".join(ttrpc_message(2 * i + 1, RESPONSE, b) for i, b in enumerate(bodies))
    # Frames of arbitrary sizes (as a Go peer's buffered writer makes them).
    wire, at = b"", 0
    for cut in [*cuts, len(stream)]:
        part = stream[at : at + cut]
        if part:
            wire += MUX_HEADER.pack(RUNTIME_CONN, len(part)) + part
        at += cut
        if at >= len(stream):
            break
    mux, ttrpc, got = MuxReader(), TtrpcReader(), []
    for i in range(0, len(wire), 97):  # the socket hands the bytes over in odd pieces
        for _, payload in mux.feed(wire[i : i + 97]):
            got += ttrpc.feed(payload)
    assert [(m.stream_id, m.kind, m.body) for m in got] == [
        (2 * i + 1, RESPONSE, b) for i, b in enumerate(bodies)
    ]
    assert ttrpc.buffered == 0


def test_an_oversized_message_is_skipped_without_being_buffered() -> None:
    reader = TtrpcReader(max_message=100)
    big = struct.pack(">IIBB", 1000, 5, REQUEST, 0)
    small = ttrpc_message(7, REQUEST, b"ok")
    got = reader.feed(big + b"a" * 300)
    assert [(m.stream_id, m.body, m.length) for m in got] == [(5, None, 1000)]
    assert reader.buffered == 0  # skipped, not kept
    got = reader.feed(b"a" * 700 + small)
    assert [(m.stream_id, m.body) for m in got] == [(7, b"ok")]


def test_an_oversized_frame_breaks_the_connection() -> None:
    with pytest.raises(ProtocolError, match="exceeds"):
        MuxReader(max_payload=1024).feed(MUX_HEADER.pack(1, 4096))


# -- the connection, against a peer written here --------------------------------------------


class Peer:
    """The runtime's side of a socket pair: writes requests on connection 1, reads answers."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.mux = MuxReader()
        self.streams = {PLUGIN_CONN: TtrpcReader(), RUNTIME_CONN: TtrpcReader()}

    async def request(self, stream_id: int, service: str, method: str, payload: bytes) -> None:
        body = request_pb2.Request(service=service, method=method, payload=payload)
        message = ttrpc_message(stream_id, REQUEST, body.SerializeToString())
        await asyncio.get_running_loop().sock_sendall(self.sock, mux_frames(PLUGIN_CONN, message))

    async def read(self, conn: int) -> object:
        loop = asyncio.get_running_loop()
        while True:
            data = await loop.sock_recv(self.sock, 65536)
            assert data, "the plugin closed the connection"
            for c, payload in self.mux.feed(data):
                for message in self.streams[c].feed(payload):
                    if c == conn:
                        return message


async def _pair(handlers):
    ours, theirs = socket.socketpair()
    theirs.setblocking(False)
    reader, writer = await asyncio.open_unix_connection(sock=ours)
    connection = NriConnection(reader, writer, handlers)
    connection.start()
    return connection, Peer(theirs)


def test_unknown_methods_are_answered_unimplemented_and_known_ones_served() -> None:
    async def main() -> None:
        async def configure(payload: bytes) -> bytes:
            request = api_pb2.ConfigureRequest.FromString(payload)
            assert request.runtime_name == "future-runtime"
            return api_pb2.ConfigureResponse(events=8).SerializeToString()

        connection, peer = await _pair({plugin_method("Configure"): configure})
        # A method of a newer NRI: answered, not dropped.
        await peer.request(1, PLUGIN_SERVICE, "ValidateContainerAdjustment", b"")
        answer = await peer.read(PLUGIN_CONN)
        response = request_pb2.Response.FromString(answer.body)
        assert (answer.stream_id, answer.kind) == (1, RESPONSE)
        assert response.status.code == UNIMPLEMENTED
        assert "ValidateContainerAdjustment" in response.status.message
        # Configure with a field this version does not know (number 9).
        payload = api_pb2.ConfigureRequest(runtime_name="future-runtime").SerializeToString()
        await peer.request(3, PLUGIN_SERVICE, "Configure", payload + bytes([9 << 3 | 0, 1]))
        answer = await peer.read(PLUGIN_CONN)
        response = request_pb2.Response.FromString(answer.body)
        assert response.status.code == 0
        assert api_pb2.ConfigureResponse.FromString(response.payload).events == 8
        connection.close()

    asyncio.run(main())


def test_calls_to_the_runtime_get_their_answer_or_its_error_status() -> None:
    async def main() -> None:
        connection, peer = await _pair({})
        call = asyncio.create_task(connection.call(RUNTIME_SERVICE, "UpdateContainers", b"", 2))
        sent = await peer.read(RUNTIME_CONN)
        assert sent.kind == REQUEST and sent.stream_id % 2 == 1
        request = request_pb2.Request.FromString(sent.body)
        assert (request.service, request.method) == (RUNTIME_SERVICE, "UpdateContainers")
        error = request_pb2.Response(status=request_pb2.Status(code=9, message="no such thing"))
        reply = ttrpc_message(sent.stream_id, RESPONSE, error.SerializeToString())
        loop = asyncio.get_running_loop()
        await loop.sock_sendall(peer.sock, mux_frames(RUNTIME_CONN, reply))
        with pytest.raises(TtrpcError) as failed:
            await call
        assert (failed.value.code, failed.value.message) == (9, "no such thing")
        # A peer that never answers: the call ends at its deadline.
        with pytest.raises(TtrpcError) as late:
            await connection.call(RUNTIME_SERVICE, "UpdateContainers", b"", 0.2)
        assert late.value.code == 4
        connection.close()

    asyncio.run(main())


# -- registration with a real containerd 1.7 -------------------------------------------------


def test_registers_with_containerd_and_serves_its_events(nri_containerd: NriContainerd) -> None:
    seen: list[str] = []
    created: list[api_pb2.CreateContainerRequest] = []

    async def configure(payload: bytes) -> bytes:
        request = api_pb2.ConfigureRequest.FromString(payload)
        seen.append(f"Configure {request.runtime_name}")
        mask = 1 << (api_pb2.CREATE_CONTAINER - 1)
        return api_pb2.ConfigureResponse(events=mask).SerializeToString()

    async def synchronize(payload: bytes) -> bytes:
        api_pb2.SynchronizeRequest.FromString(payload)
        seen.append("Synchronize")
        return api_pb2.SynchronizeResponse().SerializeToString()

    async def create(payload: bytes) -> bytes:
        created.append(api_pb2.CreateContainerRequest.FromString(payload))
        seen.append("CreateContainer")
        return api_pb2.CreateContainerResponse().SerializeToString()

    async def main() -> None:
        stop = asyncio.Event()
        session = Session(
            nri_containerd.nri_socket,
            "transport-test",
            "91",
            {
                plugin_method("Configure"): configure,
                plugin_method("Synchronize"): synchronize,
                plugin_method("CreateContainer"): create,
            },
        )
        task = asyncio.create_task(session.run(stop))
        await asyncio.wait_for(session.registered.wait(), 5)

        def run_pod() -> None:
            with KubeletEmulator(nri_containerd.socket) as kubelet:
                pod = kubelet.run_pod(manifest("transport", sleeper(), namespace="nri-transport"))
                kubelet.remove_pod(pod)

        await asyncio.to_thread(run_pod)
        stop.set()
        await task

    asyncio.run(main())
    runtime_name = nri_containerd.version().runtime_name  # containerd, cri-o
    assert seen == [f"Configure {runtime_name}", "Synchronize", "CreateContainer"]
    (request,) = created
    assert request.pod.namespace == "nri-transport" and request.container.name == "app"
    assert r"registered as \"91-transport-test\"" in nri_containerd.log_path.read_text()
