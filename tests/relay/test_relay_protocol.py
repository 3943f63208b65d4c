"""The relay at the frame level: protocol errors, flow control, upstream GOAWAY and limits."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator

import grpc
import pytest
from h2peer import Peer, Server, grpc_message, request_headers
from relay_harness import FakeUpstream, RelayThread

from enforcer.relay.h2 import AnswerHere, Call, Forward
from enforcer.relay.h2.connection import PONG_DELAY
from enforcer.relay.h2.framing import ErrorCode, Setting
from enforcer.relay.h2.grpc_wire import (
    format_grpc_timeout,
    parse_grpc_timeout,
    percent_decode,
    percent_encode,
)
from enforcer.relay.h2.windows import STREAM_WINDOW
from tests.relay import h2wire as fr

ECHO = "/test.Svc/Echo"


@pytest.fixture
def client(relay: RelayThread) -> Iterator[Callable[..., Peer]]:
    peers: list[Peer] = []

    def make(settings: dict[int, int] | None = None) -> Peer:
        peer = Peer.client(relay.socket_path, settings)
        peers.append(peer)
        return peer

    yield make
    for p in peers:
        p.close()


def data_of(frames: list[fr.Wire], sid: int) -> bytes:
    return b"".join(f[3] for f in frames if f[0] == fr.DATA and f[2] == sid)


def assert_connection_usable(relay: RelayThread) -> None:
    with grpc.insecure_channel(f"unix:{relay.socket_path}") as ch:
        assert ch.unary_unary(ECHO)(b"still up", timeout=5) == b"still up"


# --------------------------------------------------------------------------- connection basics


def test_preface_settings_and_ping(client: Callable[..., Peer]) -> None:
    peer = client()
    first = peer.next_frame()
    assert first is not None and first[0] == fr.SETTINGS
    assert (Setting.INITIAL_WINDOW_SIZE, STREAM_WINDOW) in fr.parse_settings(first[3])
    peer.frames_until(lambda f: f[0] == fr.SETTINGS and f[1] & fr.FLAG_ACK)
    peer.send(fr.ping_frame(b"12345678"))
    pong = peer.frames_until(lambda f: f[0] == fr.PING)[-1]
    assert pong[1] & fr.FLAG_ACK and pong[3] == b"12345678"


def test_request_over_continuation_padding_and_priority(
    client: Callable[..., Peer], upstream: FakeUpstream
) -> None:
    peer = client()
    headers = [*request_headers(ECHO), (b"x-filler", b"f" * 100)]
    peer.headers(1, headers, max_frame=20)  # HEADERS + several CONTINUATION frames
    peer.send(fr.frame(fr.PRIORITY, 0, 1, b"\x00\x00\x00\x00\x10"))
    message = grpc_message(b"padded body")
    padded = bytes([7]) + message + b"\x00" * 7
    peer.send(fr.frame(fr.DATA, fr.FLAG_PADDED | fr.FLAG_END_STREAM, 1, padded))
    frames = peer.frames_until(lambda f: f[2] == 1 and f[1] & fr.FLAG_END_STREAM)
    assert data_of(frames, 1) == message
    assert upstream.records[0].metadata["x-filler"] == "f" * 100


def test_stream_ids_are_mapped(client: Callable[..., Peer], upstream: FakeUpstream) -> None:
    peer = client()
    for sid in (1, 7, 41):  # gaps in the client's ids are allowed (kept upstream: see below)
        peer.headers(sid, request_headers(ECHO))
        peer.data(sid, grpc_message(b"%d" % sid), end=True)
        frames = peer.frames_until(lambda f, s=sid: f[2] == s and f[1] & fr.FLAG_END_STREAM)
        assert data_of(frames, sid) == grpc_message(b"%d" % sid)


def test_data_frames_pass_through_byte_for_byte(
    workdir: str, relay_factory: Callable[..., RelayThread]
) -> None:
    """A call keeps its stream id upstream, and its DATA frames cross the relay exactly as they
    came, both ways; a padded frame, or one with a flag HTTP/2 does not define, is passed on
    as a new frame with the same payload, without them (RFC 9113 4.1: unused flags are sent
    unset)."""
    seen: list[fr.Wire] = []

    def handler(peer: Peer) -> None:
        peer.send(fr.settings_frame({}))
        while (f := peer.next_frame(5)) is not None:
            if f[0] == fr.HEADERS:
                peer.decode(f)
            elif f[0] == fr.DATA:
                seen.append(f)
                if f[1] & fr.FLAG_END_STREAM:
                    sid = f[2]
                    peer.headers(
                        sid, [(b":status", b"200"), (b"content-type", b"application/grpc")]
                    )
                    peer.send(fr.frame(fr.DATA, 0, sid, grpc_message(b"answer %d" % sid)))
                    peer.headers(sid, [(b"grpc-status", b"0")], end=True)

    path = os.path.join(workdir, "raw.sock")
    server = Server(path, handler)
    try:
        relay = relay_factory(lambda _p: path)
        peer = Peer.client(relay.socket_path)
        message = grpc_message(b"question")
        sent = {
            1: (fr.FLAG_END_STREAM, message),
            7: (fr.FLAG_PADDED | fr.FLAG_END_STREAM, bytes([3]) + message + b"\0\0\0"),
            41: (0x2 | fr.FLAG_END_STREAM, message),  # 0x2: no flag of DATA's
        }
        answers = {}
        for sid, (flags, payload) in sent.items():
            peer.headers(sid, request_headers(ECHO))
            peer.send(fr.frame(fr.DATA, flags, sid, payload))
            frames = peer.frames_until(lambda f, s=sid: f[2] == s and f[1] & fr.FLAG_END_STREAM)
            answers[sid] = [f for f in frames if f[0] == fr.DATA and f[2] == sid]
        peer.close()
    finally:
        server.close()
    assert not server.errors
    assert seen == [(fr.DATA, fr.FLAG_END_STREAM, sid, message) for sid in sent]
    for sid in sent:
        assert answers[sid] == [(fr.DATA, 0, sid, grpc_message(b"answer %d" % sid))]


def test_ping_answers_wait_for_the_next_write_at_most_pong_delay(
    workdir: str, relay_factory: Callable[..., RelayThread], client: Callable[..., Peer]
) -> None:
    """A PING is answered after the frames of the relay's next write to that peer, so a gRPC
    peer (which sends its next BDP PING with the first DATA it reads after the answer) pings
    every other call, not every call; a PING with nothing else to write is answered within
    PONG_DELAY."""
    lone = client()
    lone.frames_until(lambda f: f[0] == fr.SETTINGS and f[1] & fr.FLAG_ACK)
    sent = time.monotonic()
    lone.send(fr.ping_frame(b"lonelone"))
    pong = lone.frames_until(lambda f: f[0] == fr.PING)[-1]
    assert pong[1] & fr.FLAG_ACK and pong[3] == b"lonelone"
    assert time.monotonic() - sent < PONG_DELAY + 0.5

    def handler(peer: Peer) -> None:  # answers every call at once, in one write
        peer.send(fr.settings_frame({}))
        while (f := peer.next_frame(5)) is not None:
            if f[0] == fr.HEADERS:
                peer.decode(f)
            elif f[0] == fr.DATA and f[1] & fr.FLAG_END_STREAM:
                status = [(b":status", b"200"), (b"content-type", b"application/grpc")]
                peer.send(
                    fr.headers_frames(f[2], peer.block(status), 16384, False),
                    fr.frame(fr.DATA, 0, f[2], grpc_message(b"answer")),
                    fr.headers_frames(f[2], peer.block([(b"grpc-status", b"0")]), 16384, True),
                )

    path = os.path.join(workdir, "raw.sock")
    server = Server(path, handler)
    try:
        relay = relay_factory(lambda _p: path)
        peer = Peer.client(relay.socket_path)
        peer.frames_until(lambda f: f[0] == fr.SETTINGS and f[1] & fr.FLAG_ACK)
        orders = []
        for i in range(10):  # the answer goes late if the runtime took over PONG_DELAY
            sid = 2 * i + 1
            opaque = b"bdp-%04d" % i
            peer.send(
                fr.ping_frame(opaque),
                fr.headers_frames(sid, peer.block(request_headers(ECHO)), 16384, False),
                fr.frame(fr.DATA, fr.FLAG_END_STREAM, sid, grpc_message(b"q")),
            )
            frames = peer.frames_until(
                lambda f, s=sid: f[2] == s and f[1] & fr.FLAG_END_STREAM, timeout=5
            )
            answered = len(frames) - 1  # the response's last frame
            if all(f[0] != fr.PING for f in frames):
                frames += peer.frames_until(lambda f: f[0] == fr.PING)
            pongs = [i for i, f in enumerate(frames) if f[0] == fr.PING]
            assert [(frames[i][1] & fr.FLAG_ACK, frames[i][3]) for i in pongs] == [
                (fr.FLAG_ACK, opaque)
            ]
            orders.append(pongs[0] > answered)
        peer.close()
    finally:
        server.close()
    assert not server.errors
    assert any(orders), "no PING answer went out with the response that followed it"


# --------------------------------------------------------------------------- protocol errors


@pytest.mark.parametrize(
    ("send", "code"),
    [
        (lambda p: p.send(fr.frame(fr.DATA, 0, 1, b"x")), ErrorCode.PROTOCOL_ERROR),
        (lambda p: p.send(fr.frame(fr.DATA, 0, 0, b"x")), ErrorCode.PROTOCOL_ERROR),
        (lambda p: p.send(fr.frame_header(fr.DATA, 0, 1, 20000)), ErrorCode.FRAME_SIZE_ERROR),
        (lambda p: p.send(fr.frame(fr.HEADERS, 4, 1, b"\xbe")), ErrorCode.COMPRESSION_ERROR),
        (
            lambda p: p.headers(2, request_headers(ECHO), end=True),
            ErrorCode.PROTOCOL_ERROR,
        ),
        (
            lambda p: p.send(
                fr.frame(fr.HEADERS, 0, 1, p.encoder.encode(request_headers(ECHO))),
                fr.ping_frame(b"12345678"),
            ),
            ErrorCode.PROTOCOL_ERROR,
        ),
        (lambda p: p.send(fr.window_update_frame(0, 0)), ErrorCode.PROTOCOL_ERROR),
        (lambda p: p.send(fr.window_update_frame(0, (1 << 31) - 1)), ErrorCode.FLOW_CONTROL_ERROR),
        (lambda p: p.send(fr.settings_frame({Setting.ENABLE_PUSH: 2})), ErrorCode.PROTOCOL_ERROR),
        (
            lambda p: p.send(fr.settings_frame({Setting.INITIAL_WINDOW_SIZE: 1 << 31})),
            ErrorCode.FLOW_CONTROL_ERROR,
        ),
        (
            lambda p: p.send(fr.settings_frame({Setting.MAX_FRAME_SIZE: 100})),
            ErrorCode.PROTOCOL_ERROR,
        ),
        (lambda p: p.send(fr.frame(fr.SETTINGS, 0, 0, b"\x00")), ErrorCode.FRAME_SIZE_ERROR),
        (lambda p: p.send(fr.frame(fr.PING, 0, 0, b"short")), ErrorCode.FRAME_SIZE_ERROR),
        (lambda p: p.send(fr.frame(fr.PUSH_PROMISE, 4, 1, b"\x00" * 4)), ErrorCode.PROTOCOL_ERROR),
        (lambda p: p.send(fr.rst_stream_frame(9, 0)), ErrorCode.PROTOCOL_ERROR),
    ],
    ids=[
        "data-idle-stream",
        "data-stream-0",
        "frame-too-large",
        "bad-hpack-index",
        "even-stream-id",
        "interleaved-continuation",
        "window-update-0",
        "window-overflow",
        "enable-push-2",
        "initial-window-too-big",
        "max-frame-too-small",
        "settings-bad-length",
        "ping-bad-length",
        "push-promise",
        "rst-idle-stream",
    ],
)
def test_protocol_errors_get_goaway(
    client: Callable[..., Peer],
    relay: RelayThread,
    send: Callable[[Peer], None],
    code: ErrorCode,
) -> None:
    peer = client()
    send(peer)
    _, got, debug = peer.goaway()
    assert got == code, debug
    assert peer.quiet_frames(1.0) == [] and peer.eof  # then the connection is closed
    assert_connection_usable(relay)  # other connections are unaffected


def test_bad_preface(relay: RelayThread) -> None:
    import socket

    sock = socket.socket(socket.AF_UNIX)
    sock.connect(relay.socket_path)
    peer = Peer(sock)
    peer.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    _, code, _ = peer.goaway()
    assert code == ErrorCode.PROTOCOL_ERROR
    peer.close()
    assert_connection_usable(relay)


def test_stream_error_resets_only_that_stream(client: Callable[..., Peer]) -> None:
    peer = client()
    peer.headers(1, request_headers("/test.Svc/Slow"))
    peer.send(fr.window_update_frame(1, 0))
    rst = peer.frames_until(lambda f: f[0] == fr.RST_STREAM)[-1]
    assert rst[2] == 1 and fr.parse_u32(rst[3], "") == ErrorCode.PROTOCOL_ERROR
    peer.headers(3, request_headers(ECHO))
    peer.data(3, grpc_message(b"ok"), end=True)
    frames = peer.frames_until(lambda f: f[2] == 3 and f[1] & fr.FLAG_END_STREAM)
    assert data_of(frames, 3) == grpc_message(b"ok")


# --------------------------------------------------------------------------- flow control


def test_relay_respects_the_clients_windows(client: Callable[..., Peer]) -> None:
    peer = client({Setting.INITIAL_WINDOW_SIZE: 1000})
    body = os.urandom(200_000)
    message = grpc_message(body)
    peer.headers(1, request_headers(ECHO))
    peer.data_chunked(1, message, end=True)
    frames = peer.quiet_frames(0.5)
    assert len(data_of(frames, 1)) == 1000  # the stream window
    peer.send(fr.window_update_frame(1, 1 << 20))
    frames = peer.quiet_frames(0.5)
    assert len(data_of(frames, 1)) == 65535 - 1000  # now the connection window limits
    assert all(len(f[3]) <= 16384 for f in frames if f[0] == fr.DATA)
    peer.send(fr.window_update_frame(0, 1 << 20))
    frames = peer.frames_until(lambda f: f[2] == 1 and f[1] & fr.FLAG_END_STREAM)
    assert len(data_of(frames, 1)) == len(message) - 65535


def test_window_grows_with_a_settings_change(client: Callable[..., Peer]) -> None:
    peer = client({Setting.INITIAL_WINDOW_SIZE: 0})
    peer.send(fr.window_update_frame(0, 1 << 20))
    message = grpc_message(b"w" * 5000)
    peer.headers(1, request_headers(ECHO))
    peer.data(1, message, end=True)
    frames = peer.quiet_frames(0.5)
    assert data_of(frames, 1) == b"" and any(f[0] == fr.HEADERS for f in frames)
    peer.send(fr.settings_frame({Setting.INITIAL_WINDOW_SIZE: 100_000}))
    frames = peer.frames_until(lambda f: f[2] == 1 and f[1] & fr.FLAG_END_STREAM)
    assert data_of(frames, 1) == message


def test_relay_honours_the_peers_max_frame_size(
    workdir: str,
    relay_factory: Callable[..., RelayThread],
    channel_factory: Callable[[str], grpc.Channel],
) -> None:
    sizes: list[int] = []

    def handler(peer: Peer) -> None:
        peer.send(
            fr.settings_frame(
                {Setting.MAX_FRAME_SIZE: 20000, Setting.INITIAL_WINDOW_SIZE: 1 << 24}
            ),
            fr.window_update_frame(0, 1 << 24),
        )
        frames = peer.frames_until(lambda f: f[0] == fr.DATA and f[1] & fr.FLAG_END_STREAM)
        sizes.extend(len(f[3]) for f in frames if f[0] == fr.DATA)
        body = b"".join(f[3] for f in frames if f[0] == fr.DATA)
        peer.headers(1, [(b":status", b"200"), (b"content-type", b"application/grpc")])
        peer.data_chunked(1, body)
        peer.headers(1, [(b"grpc-status", b"0")], end=True)
        peer.quiet_frames(0.3)

    async def triple(call: Call) -> Forward:
        return Forward(call.message * 3)  # the relay frames this message itself

    path = os.path.join(workdir, "frames.sock")
    server = Server(path, handler)
    try:
        relay = relay_factory(lambda _p: path, {ECHO: triple})
        stub = channel_factory(relay.socket_path).unary_unary(ECHO)
        assert stub(b"abc" * 20000, timeout=10) == b"abc" * 60000
        assert max(sizes) == 20000 and sum(sizes) == 180005
        assert not server.errors
    finally:
        server.close()


def test_relay_credits_the_clients_data(client: Callable[..., Peer]) -> None:
    """Sending more than the initial windows works: the relay replenishes both."""
    peer = client()
    peer.send(fr.window_update_frame(0, 1 << 30))
    message = grpc_message(os.urandom(STREAM_WINDOW + (1 << 20)))
    peer.headers(1, request_headers(ECHO), end=False)
    peer.send(fr.settings_frame({Setting.INITIAL_WINDOW_SIZE: 1 << 30}))
    sent = 0
    updates = 0
    window = STREAM_WINDOW  # what the relay lets us send on the stream before it credits more
    while sent < len(message):
        chunk = message[sent : sent + 16384]
        # A client that respects flow control waits for the relay's credit (on a loaded
        # machine the relay may be slower than this loop).
        while window < len(chunk):
            f = peer.next_frame(timeout=20)
            assert f is not None, "the relay never credited the stream"
            if f[0] == fr.WINDOW_UPDATE and f[2] == 1:
                updates += 1
                window += int.from_bytes(f[3][:4], "big") & 0x7FFFFFFF
        sent += len(chunk)
        window -= len(chunk)
        peer.data(1, chunk, end=sent == len(message))
        while (f := peer.next_frame(0)) is not None:
            if f[0] == fr.WINDOW_UPDATE and f[2] == 1:
                updates += 1
                window += int.from_bytes(f[3][:4], "big") & 0x7FFFFFFF
    frames = peer.frames_until(lambda f: f[2] == 1 and f[1] & fr.FLAG_END_STREAM, timeout=20)
    updates += sum(1 for f in frames if f[0] == fr.WINDOW_UPDATE and f[2] == 1)
    assert updates >= 1
    assert data_of(frames, 1) == message[-len(data_of(frames, 1)) :]


# --------------------------------------------------------------------------- trailers-only


def test_refusal_is_a_trailers_only_response(
    upstream: FakeUpstream, relay_factory: Callable[..., RelayThread]
) -> None:
    async def refuse(call: Call) -> AnswerHere:
        return AnswerHere(grpc.StatusCode.PERMISSION_DENIED, "50% ü\n")

    relay = relay_factory(lambda _p: upstream.path, {ECHO: refuse}, name="r2.sock")
    peer = Peer.client(relay.socket_path)
    try:
        peer.headers(1, request_headers(ECHO))
        peer.data(1, grpc_message(b"x"), end=True)
        frames = peer.frames_until(lambda f: f[0] == fr.HEADERS and f[2] == 1)
        block = frames[-1]
        assert block[1] & fr.FLAG_END_STREAM
        assert peer.decode(block) == [
            (b":status", b"200"),
            (b"content-type", b"application/grpc"),
            (b"grpc-status", b"7"),
            (b"grpc-message", b"50%25 %C3%BC%0A"),
        ]
    finally:
        peer.close()


def test_percent_encoding() -> None:
    assert percent_encode("plain text") == b"plain text"
    assert percent_encode("a%b\u00fc\t") == b"a%25b%C3%BC%09"
    assert percent_decode(b"a%25b%C3%BC%09") == "a%b\u00fc\t"
    assert percent_decode(b"bad %zz %C3") == "bad %zz \ufffd"


@pytest.mark.parametrize(
    ("value", "seconds"), [(b"100m", 0.1), (b"5S", 5.0), (b"2M", 120.0), (b"1H", 3600.0),
                           (b"250u", 250e-6), (b"7n", 7e-9), (b"x", None), (b"123456789S", None),
                           (b"S", None)],
)  # fmt: skip
def test_grpc_timeout_parsing(value: bytes, seconds: float | None) -> None:
    assert parse_grpc_timeout(value) == (None if seconds is None else pytest.approx(seconds))


@pytest.mark.parametrize("seconds", [1e-9, 0.0123, 1.5, 99.0, 3600 * 30, 1e9])
def test_grpc_timeout_formatting(seconds: float) -> None:
    value = format_grpc_timeout(seconds)
    parsed = parse_grpc_timeout(value)
    assert parsed is not None and len(value) <= 9
    assert parsed <= seconds * (1 + 1e-9) and parsed >= seconds * 0.98


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
