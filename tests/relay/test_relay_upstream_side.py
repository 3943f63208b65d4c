"""The HTTP/2 relay at the wire, its upstream side and header list limits: raw frames from a
client peer (`client`) and a raw or grpcio upstream."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

import grpc
import pytest
from h2peer import Peer, Server, data_of, grpc_message, request_headers
from relay_harness import ECHO, RelayThread

from enforcer.relay.h2.framing import ErrorCode, Setting
from tests.relay import h2wire as fr

# --------------------------------------------------------------------------- the upstream side


def serve_echo(
    peer: Peer, settings: dict[int, int] | None = None, bodies: dict[int, bytes] | None = None
) -> dict[int, bytes]:
    """A minimal gRPC-over-HTTP/2 echo server for one connection; returns bodies by stream
    (kept in ``bodies`` as they come, when given)."""
    peer.send(fr.settings_frame(settings or {}))
    bodies = {} if bodies is None else bodies
    while (f := peer.next_frame(10)) is not None:
        ftype, flags, sid, payload = f
        if ftype == fr.HEADERS:
            peer.decode(f)
            bodies.setdefault(sid, b"")
        elif ftype == fr.DATA:
            bodies[sid] += payload
            if payload:
                peer.send(fr.window_update_frame(0, len(payload)),
                          fr.window_update_frame(sid, len(payload)))  # fmt: skip
        if flags & fr.FLAG_END_STREAM and ftype in (fr.HEADERS, fr.DATA):
            peer.headers(sid, [(b":status", b"200"), (b"content-type", b"application/grpc")])
            peer.data_chunked(sid, bodies[sid])
            peer.headers(sid, [(b"grpc-status", b"0")], end=True)
    return bodies


def test_relay_respects_the_upstreams_windows(
    workdir: str,
    relay_factory: Callable[..., RelayThread],
    channel_factory: Callable[[str], grpc.Channel],
) -> None:
    seen: dict[str, object] = {}

    def respond(peer: Peer, sid: int, body: bytes) -> None:
        peer.headers(sid, [(b":status", b"200"), (b"content-type", b"application/grpc")])
        peer.data_chunked(sid, body)
        peer.headers(sid, [(b"grpc-status", b"0")], end=True)

    def handler(peer: Peer) -> None:
        peer.send(
            fr.settings_frame({Setting.INITIAL_WINDOW_SIZE: 1000}),
            fr.window_update_frame(0, 1 << 30),
        )
        # A first small call, after which the relay surely has our SETTINGS.
        frames = peer.frames_until(lambda f: f[2] == 1 and f[1] & fr.FLAG_END_STREAM)
        seen["settings"] = [fr.parse_settings(f[3]) for f in frames if f[0] == fr.SETTINGS]
        respond(peer, 1, data_of(frames, 1))
        frames = peer.quiet_frames(0.5)
        seen["before"] = len(data_of(frames, 3))
        peer.send(fr.window_update_frame(3, 1 << 30))
        rest = peer.frames_until(lambda f: f[2] == 3 and f[1] & fr.FLAG_END_STREAM)
        respond(peer, 3, data_of(frames + rest, 3))
        peer.quiet_frames(0.5)

    path = os.path.join(workdir, "raw.sock")
    server = Server(path, handler)
    try:
        relay = relay_factory(lambda _p: path)
        stub = channel_factory(relay.socket_path).unary_unary(ECHO)
        assert stub(b"small", timeout=10) == b"small"
        payload = os.urandom(300_000)
        assert stub(payload, timeout=10) == payload
        assert seen["before"] == 1000
        settings = seen["settings"]
        assert any((Setting.ENABLE_PUSH, 0) in s for s in settings)  # type: ignore[attr-defined]
        assert not server.errors
    finally:
        server.close()


def test_upstream_concurrency_limit_queues_streams(
    workdir: str,
    relay_factory: Callable[..., RelayThread],
    channel_factory: Callable[[str], grpc.Channel],
) -> None:
    open_now = []
    peak = [0]

    def handler(peer: Peer) -> None:
        peer.send(fr.settings_frame({Setting.MAX_CONCURRENT_STREAMS: 1}))
        while (f := peer.next_frame(5)) is not None:
            ftype, flags, sid, payload = f
            if ftype == fr.HEADERS:
                peer.decode(f)
                open_now.append(sid)
                peak[0] = max(peak[0], len(open_now))
            if ftype == fr.DATA and flags & fr.FLAG_END_STREAM:
                time.sleep(0.05)
                open_now.remove(sid)
                peer.headers(sid, [(b":status", b"200"), (b"content-type", b"application/grpc")])
                peer.data(sid, payload)
                peer.headers(sid, [(b"grpc-status", b"0")], end=True)

    path = os.path.join(workdir, "limited.sock")
    server = Server(path, handler)
    try:
        relay = relay_factory(lambda _p: path)
        stub = channel_factory(relay.socket_path).unary_unary(ECHO)
        stub(b"warm", timeout=5)  # the upstream's SETTINGS are in
        calls = [stub.future(b"%d" % i, timeout=10) for i in range(5)]
        assert [c.result() for c in calls] == [b"%d" % i for i in range(5)]
        assert peak[0] == 1
        assert not server.errors
    finally:
        server.close()


def test_upstream_goaway_finishes_allowed_streams_and_reconnects(
    workdir: str,
    relay_factory: Callable[..., RelayThread],
    channel_factory: Callable[[str], grpc.Channel],
) -> None:
    both_open = threading.Event()

    def first(peer: Peer) -> None:
        peer.send(fr.settings_frame({}))
        sids: list[int] = []
        while len(sids) < 2:
            f = peer.next_frame(5)
            assert f is not None
            if f[0] == fr.HEADERS:
                peer.decode(f)
                sids.append(f[2])
        both_open.set()
        peer.send(fr.goaway_frame(sids[0], ErrorCode.NO_ERROR))  # only the first is handled
        peer.headers(sids[0], [(b":status", b"200"), (b"content-type", b"application/grpc")])
        peer.data(sids[0], grpc_message(b"first"))
        peer.headers(sids[0], [(b"grpc-status", b"0")], end=True)
        peer.quiet_frames(1.0)

    handlers = [first, serve_echo]

    def handler(peer: Peer) -> None:
        handlers.pop(0)(peer)

    path = os.path.join(workdir, "goaway.sock")
    server = Server(path, handler)
    try:
        relay = relay_factory(lambda _p: path)
        stub = channel_factory(relay.socket_path).unary_unary(ECHO)
        one = stub.future(b"a", timeout=10)
        deadline = time.monotonic() + 5
        while server.accepted < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)
        two = stub.future(b"b", timeout=10)
        assert both_open.wait(5)
        results = []
        for call in (one, two):
            try:
                results.append(call.result())
            except grpc.RpcError as err:
                results.append(err.code())
        assert sorted(map(str, results)) == sorted(
            map(str, [b"first", grpc.StatusCode.UNAVAILABLE])
        )
        # New calls go to a new connection.
        assert stub(b"after", timeout=5) == b"after"
        assert server.accepted == 2
        assert not server.errors
    finally:
        server.close()


def test_graceful_close_sends_goaway(relay: RelayThread, client: Callable[..., Peer]) -> None:
    peer = client()
    peer.headers(1, request_headers(ECHO))
    peer.data(1, grpc_message(b"x"), end=True)
    peer.frames_until(lambda f: f[2] == 1 and f[1] & fr.FLAG_END_STREAM)
    relay.close(grace=1.0)
    last, code, _ = peer.goaway()
    assert (last, code) == (1, ErrorCode.NO_ERROR)


# --------------------------------------------------------------------------- header list limits


def test_request_headers_over_the_runtimes_limit_are_answered_by_the_relay(
    workdir: str,
    relay_factory: Callable[..., RelayThread],
    channel_factory: Callable[[str], grpc.Channel],
) -> None:
    """The runtime announced SETTINGS_MAX_HEADER_LIST_SIZE: a larger request never reaches it."""
    opened: dict[int, bytes] = {}
    path = os.path.join(workdir, "limited.sock")
    server = Server(
        path, lambda peer: serve_echo(peer, {Setting.MAX_HEADER_LIST_SIZE: 1024}, opened)
    )
    try:
        relay = relay_factory(lambda _p: path)
        stub = channel_factory(relay.socket_path).unary_unary(ECHO)
        assert stub(b"small", timeout=10) == b"small"  # the relay now has the runtime's SETTINGS
        with pytest.raises(grpc.RpcError) as err:
            stub(b"big", metadata=[("x-big", "y" * 2000)], timeout=10)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "runtime's limit of 1024" in (err.value.details() or "")
        assert stub(b"again", timeout=10) == b"again"
    finally:
        server.close()
    assert len(opened) == 2  # the big one never opened upstream


def test_response_headers_over_the_clients_limit_become_a_status(
    workdir: str, relay_factory: Callable[..., RelayThread]
) -> None:
    """The client announced SETTINGS_MAX_HEADER_LIST_SIZE: a larger response is not sent."""

    def handler(peer: Peer) -> None:
        peer.send(fr.settings_frame({}))
        f = peer.frames_until(lambda f: f[0] in (fr.HEADERS, fr.DATA) and f[1] & 1)[-1]
        big = [(b":status", b"200"), (b"content-type", b"application/grpc"), (b"x-big", b"z" * 900)]
        peer.headers(f[2], big)
        peer.data(f[2], grpc_message(b"answer"))
        peer.headers(f[2], [(b"grpc-status", b"0")], end=True)
        peer.quiet_frames(1.0)

    path = os.path.join(workdir, "big-answers.sock")
    server = Server(path, handler)
    try:
        relay = relay_factory(lambda _p: path)
        peer = Peer.client(relay.socket_path, {Setting.MAX_HEADER_LIST_SIZE: 500})
        peer.headers(1, request_headers(ECHO))
        peer.data(1, grpc_message(b"question"), end=True)
        frames = peer.frames_until(lambda f: f[2] == 1 and f[1] & fr.FLAG_END_STREAM)
        blocks = [dict(peer.decode(f)) for f in frames if f[0] == fr.HEADERS and f[2] == 1]
        peer.close()
    finally:
        server.close()
    assert len(blocks) == 1 and b"x-big" not in blocks[0]
    assert blocks[0][b"grpc-status"] == b"13"
    assert b"client's limit of 500" in blocks[0][b"grpc-message"]
    assert data_of(frames, 1) == b""
