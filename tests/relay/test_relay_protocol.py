"""The relay at the frame level: connection basics, protocol errors, flow control, trailers-only
responses (the upstream side and header list limits: test_relay_upstream_side)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import grpc
import pytest
from h2peer import Peer, Server, data_of, grpc_message, request_headers
from relay_harness import ECHO, FakeUpstream, RelayThread

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
