"""The HTTP/2 relay end to end: a real grpcio client, the relay, a real grpcio upstream."""

from __future__ import annotations

import asyncio
import os
import stat
import threading
import time
from collections.abc import Callable
from concurrent import futures

import grpc
import pytest
from relay_harness import FakeUpstream, RelayThread

from enforcer.relay.h2 import AnswerHere, Call, Forward, Response

ECHO = "/test.Svc/Echo"


def unary(channel: grpc.Channel, path: str = ECHO) -> grpc.UnaryUnaryMultiCallable:
    return channel.unary_unary(path)


# --------------------------------------------------------------------------- passthrough


def test_unary_echo(channel: grpc.Channel, upstream: FakeUpstream) -> None:
    assert unary(channel)(b"hello", timeout=5) == b"hello"
    assert upstream.methods() == [ECHO]


def test_empty_message(channel: grpc.Channel) -> None:
    assert unary(channel)(b"", timeout=5) == b""


def test_unknown_method_paths_pass_through(channel: grpc.Channel, upstream: FakeUpstream) -> None:
    assert unary(channel, "/never.Heard/Of")(b"x", timeout=5) == b"x"
    with pytest.raises(grpc.RpcError) as err:
        unary(channel, "/never.Heard/Nothing")(b"x", timeout=5)
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert upstream.methods() == ["/never.Heard/Of"]


def test_large_messages_both_ways(channel: grpc.Channel) -> None:
    payload = os.urandom(5 << 20)
    assert unary(channel)(payload, timeout=30) == payload


def test_concurrent_large_messages(channel: grpc.Channel) -> None:
    payloads = [os.urandom((1 << 20) + i) for i in range(6)]
    stub = unary(channel)
    calls = [stub.future(p, timeout=30) for p in payloads]
    assert [c.result() for c in calls] == payloads


def test_fifty_concurrent_calls(channel: grpc.Channel, upstream: FakeUpstream) -> None:
    stub = unary(channel)
    calls = [stub.future(b"call-%d" % i, timeout=10) for i in range(50)]
    assert [c.result() for c in calls] == [b"call-%d" % i for i in range(50)]
    assert len(upstream.records) == 50


def test_many_sequential_calls_reuse_one_upstream_connection(
    channel: grpc.Channel, relay: RelayThread
) -> None:
    stub = unary(channel)
    for i in range(200):
        assert stub(b"%d" % i, timeout=5) == b"%d" % i
    (conn,) = relay.server.conns
    assert len(conn.upstreams) == 1
    assert not conn.streams


def test_server_streaming(channel: grpc.Channel) -> None:
    call = channel.unary_stream("/test.Svc/ServerStream")(b"100", timeout=10)
    assert list(call) == [b"msg-%d" % i for i in range(100)]
    assert call.code() == grpc.StatusCode.OK


def test_client_streaming(channel: grpc.Channel) -> None:
    stub = channel.stream_unary("/test.Svc/ClientStream")
    parts = [b"p%d" % i for i in range(50)]
    assert stub(iter(parts), timeout=10) == b"|".join(parts)


def test_bidi_streaming(channel: grpc.Channel) -> None:
    stub = channel.stream_stream("/test.Svc/Bidi")
    parts = [b"m%d" % i for i in range(50)]
    assert list(stub(iter(parts), timeout=10)) == [p.upper() for p in parts]


def test_bidi_streaming_large(channel: grpc.Channel) -> None:
    stub = channel.stream_stream("/test.Svc/Bidi")
    parts = [os.urandom(300_000).hex().encode() for _ in range(6)]  # 600 kB messages
    assert list(stub(iter(parts), timeout=30)) == [p.upper() for p in parts]


def test_metadata_both_ways(channel: grpc.Channel, upstream: FakeUpstream) -> None:
    binary = bytes(range(256))
    response, call = unary(channel).with_call(
        b"m",
        timeout=5,
        metadata=[("x-text", "hello world"), ("x-data-bin", binary), ("x-dup", "a")],
    )
    assert response == b"m"
    (rec,) = upstream.records
    assert rec.metadata["x-text"] == "hello world"
    assert rec.metadata["x-data-bin"] == binary
    initial = dict(call.initial_metadata())
    assert initial["echo-x-text"] == "hello world"
    assert initial["echo-x-data-bin"] == binary
    trailing = dict(call.trailing_metadata())
    assert trailing["trailer-x"] == "t"
    assert trailing["trailer-bin"] == b"\x00\x01\xfe\xff"


def test_large_metadata_needs_continuation_frames(
    channel: grpc.Channel, upstream: FakeUpstream
) -> None:
    big = "v" * 40_000  # more than one 16 KiB frame: HEADERS + CONTINUATION on both sides
    response, call = unary(channel).with_call(b"m", timeout=5, metadata=[("x-big", big)])
    assert response == b"m"
    assert upstream.records[0].metadata["x-big"] == big
    assert dict(call.initial_metadata())["echo-x-big"] == big


def test_error_status_and_message(channel: grpc.Channel) -> None:
    message = "no such container: ünïcode 100% \u2603"
    with pytest.raises(grpc.RpcError) as err:
        unary(channel, "/test.Svc/Fail")(message.encode(), timeout=5)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert err.value.details() == message


def test_deadline_propagates(channel: grpc.Channel, upstream: FakeUpstream) -> None:
    start = time.monotonic()
    with pytest.raises(grpc.RpcError) as err:
        unary(channel, "/test.Svc/Slow")(b"5", timeout=0.5)
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert time.monotonic() - start < 2.0
    (rec,) = upstream.records
    # The client's deadline reached the upstream (grpc rounds the encoded timeout up a bit).
    assert rec.time_remaining is not None and rec.time_remaining <= 0.6
    assert rec.cancelled.wait(3), "upstream handler was not cancelled"


def test_client_cancel_reaches_upstream(channel: grpc.Channel, upstream: FakeUpstream) -> None:
    call = unary(channel, "/test.Svc/Slow").future(b"10", timeout=20)
    deadline = time.monotonic() + 5
    while not upstream.records and time.monotonic() < deadline:
        time.sleep(0.01)
    assert upstream.records[0].started.wait(5)
    call.cancel()
    assert upstream.records[0].cancelled.wait(3), "upstream never saw the cancellation"


def test_routing_to_several_upstreams(
    workdir: str,
    upstream: FakeUpstream,
    relay_factory: Callable[..., RelayThread],
    channel_factory: Callable[[str], grpc.Channel],
) -> None:
    images = FakeUpstream(os.path.join(workdir, "images.sock")).start()
    try:
        relay = relay_factory(
            lambda p: images.path if p.startswith("/runtime.v1.ImageService/") else upstream.path
        )
        ch = channel_factory(relay.socket_path)
        assert unary(ch, "/runtime.v1.ImageService/ListImages")(b"i", timeout=5) == b"i"
        assert unary(ch, "/runtime.v1.RuntimeService/Version")(b"r", timeout=5) == b"r"
        assert images.methods() == ["/runtime.v1.ImageService/ListImages"]
        assert upstream.methods() == ["/runtime.v1.RuntimeService/Version"]
    finally:
        images.stop()


# --------------------------------------------------------------------------- interception


def test_forward_rewrites_the_message(
    upstream: FakeUpstream,
    relay_factory: Callable[..., RelayThread],
    channel_factory: Callable[[str], grpc.Channel],
) -> None:
    seen: list[Call] = []

    async def rewrite(call: Call) -> Forward:
        seen.append(call)
        return Forward(call.message + b"+rewritten")

    relay = relay_factory(lambda _p: upstream.path, {ECHO: rewrite})
    ch = channel_factory(relay.socket_path)
    response, call = unary(ch).with_call(b"original", timeout=5, metadata=[("x-who", "kubelet")])
    assert response == b"original+rewritten"
    assert upstream.records[0].requests == [b"original+rewritten"]
    assert ("x-who", "kubelet") in seen[0].metadata
    assert seen[0].method == ECHO and seen[0].message == b"original"
    assert all(not k.startswith(":") for k, _ in seen[0].metadata)
    # Metadata still flows both ways for intercepted calls.
    assert dict(call.initial_metadata())["echo-x-who"] == "kubelet"
    assert dict(call.trailing_metadata())["trailer-bin"] == b"\x00\x01\xfe\xff"
    # Other methods are not intercepted.
    assert unary(ch, "/test.Svc/Other")(b"plain", timeout=5) == b"plain"
    assert len(seen) == 1


def test_forward_passes_the_remaining_deadline(
    upstream: FakeUpstream,
    relay_factory: Callable[..., RelayThread],
    channel_factory: Callable[[str], grpc.Channel],
) -> None:
    async def slow(call: Call) -> Forward:
        await asyncio.sleep(0.5)
        return Forward(call.message)

    relay = relay_factory(lambda _p: upstream.path, {ECHO: slow})
    assert unary(channel_factory(relay.socket_path))(b"x", timeout=3) == b"x"
    remaining = upstream.records[0].time_remaining
    # 3 s minus the interceptor's 0.5 s (grpc rounds encoded timeouts up a little).
    assert remaining is not None and remaining <= 2.6


def test_intercepted_call_opened_after_later_passthrough_calls(
    upstream: FakeUpstream,
    relay_factory: Callable[..., RelayThread],
    channel_factory: Callable[[str], grpc.Channel],
) -> None:
    """Passed-through calls keep kubelet's stream ids upstream; an intercepted call opened
    after them (a lower id on kubelet's side) still gets a new, higher id there, as a real
    gRPC server insists."""
    release = threading.Event()

    async def slow(call: Call) -> Forward:
        while not release.is_set():
            await asyncio.sleep(0.01)
        return Forward(call.message)

    relay = relay_factory(lambda _p: upstream.path, {ECHO: slow})
    ch = channel_factory(relay.socket_path)
    held = unary(ch).future(b"held", timeout=10)
    time.sleep(0.2)
    for i in range(3):
        assert unary(ch, "/test.Svc/Other")(b"%d" % i, timeout=5) == b"%d" % i
    release.set()
    assert held.result() == b"held"
    assert unary(ch, "/test.Svc/Other")(b"after", timeout=5) == b"after"
    assert [r.method for r in upstream.records] == ["/test.Svc/Other"] * 3 + [
        ECHO,
        "/test.Svc/Other",
    ]


def test_interceptor_slower_than_the_deadline(
    upstream: FakeUpstream,
    relay_factory: Callable[..., RelayThread],
    channel_factory: Callable[[str], grpc.Channel],
) -> None:
    release = threading.Event()

    async def slow(call: Call) -> Forward:
        while not release.is_set():
            await asyncio.sleep(0.01)
        return Forward(call.message)

    relay = relay_factory(lambda _p: upstream.path, {ECHO: slow})
    ch = channel_factory(relay.socket_path)
    with pytest.raises(grpc.RpcError) as err:
        unary(ch)(b"x", timeout=0.2)
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert relay.wait_idle()  # the client's RST_STREAM arrived while intercepting
    release.set()
    time.sleep(0.2)
    assert upstream.records == []  # abandoned before it was forwarded
    assert unary(ch, "/test.Svc/Other")(b"ok", timeout=5) == b"ok"


def test_forward_large_rewritten_message(
    upstream: FakeUpstream,
    relay_factory: Callable[..., RelayThread],
    channel_factory: Callable[[str], grpc.Channel],
) -> None:
    async def grow(call: Call) -> Forward:
        return Forward(call.message * 3)

    relay = relay_factory(lambda _p: upstream.path, {ECHO: grow})
    payload = os.urandom(1 << 20)
    assert unary(channel_factory(relay.socket_path))(payload, timeout=30) == payload * 3


def test_refuse_never_reaches_upstream(
    upstream: FakeUpstream,
    relay_factory: Callable[..., RelayThread],
    channel_factory: Callable[[str], grpc.Channel],
) -> None:
    async def refuse(call: Call) -> AnswerHere:
        return AnswerHere(grpc.StatusCode.FAILED_PRECONDITION, "no cpus left: ß 50%")

    relay = relay_factory(lambda _p: upstream.path, {ECHO: refuse})
    ch = channel_factory(relay.socket_path)
    for _ in range(3):  # the connection stays usable after a refusal
        with pytest.raises(grpc.RpcError) as err:
            unary(ch)(b"x", timeout=5)
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert err.value.details() == "no cpus left: ß 50%"
    assert upstream.records == []
    assert unary(ch, "/test.Svc/Other")(b"ok", timeout=5) == b"ok"


def test_on_response_runs_before_the_client_sees_the_answer(
    upstream: FakeUpstream,
    relay_factory: Callable[..., RelayThread],
    channel_factory: Callable[[str], grpc.Channel],
) -> None:
    responses: list[tuple[Response, float]] = []

    async def hook(response: Response) -> None:
        await asyncio.sleep(0.3)
        responses.append((response, time.monotonic()))

    async def intercept(call: Call) -> Forward:
        return Forward(call.message, on_response=hook)

    relay = relay_factory(lambda _p: upstream.path, {ECHO: intercept})
    ch = channel_factory(relay.socket_path)
    response, call = unary(ch).with_call(b"payload", timeout=5, metadata=[("x-a", "1")])
    answered = time.monotonic()
    assert response == b"payload"
    ((seen, hook_done),) = responses
    assert seen == Response(status=0, details="", message=b"payload")
    assert hook_done <= answered
    assert dict(call.initial_metadata())["echo-x-a"] == "1"
    assert dict(call.trailing_metadata())["trailer-x"] == "t"


def test_observer_sees_the_answer_without_holding_it(
    upstream: FakeUpstream,
    relay_factory: Callable[..., RelayThread],
    channel_factory: Callable[[str], grpc.Channel],
) -> None:
    # hold=False: the client has its answer while the observer is still busy with its copy.
    release = threading.Event()
    seen: list[Response] = []

    async def hook(response: Response) -> None:
        await asyncio.get_running_loop().run_in_executor(None, release.wait, 10)
        seen.append(response)

    async def intercept(call: Call) -> Forward:
        return Forward(call.message, on_response=hook, hold=False)

    relay = relay_factory(lambda _p: upstream.path, {ECHO: intercept})
    ch = channel_factory(relay.socket_path)
    payload = os.urandom(200_000)  # several DATA frames
    response, call = unary(ch).with_call(payload, timeout=5, metadata=[("x-a", "1")])
    assert response == payload and seen == []
    assert dict(call.trailing_metadata())["trailer-x"] == "t"
    release.set()
    deadline = time.monotonic() + 5
    while not seen and time.monotonic() < deadline:
        time.sleep(0.01)
    assert seen == [Response(status=0, details="", message=payload)]


def test_tap_sees_request_and_response_without_holding_either(
    upstream: FakeUpstream,
    relay_factory: Callable[..., RelayThread],
    channel_factory: Callable[[str], grpc.Channel],
) -> None:
    started: list[str] = []
    seen: list[tuple[bytes, Response]] = []

    def make_tap() -> Callable[[bytes, Response], None]:
        started.append("call")  # made when the call starts, before any answer
        return lambda request, response: seen.append((request, response))

    relay = relay_factory(lambda _p: upstream.path, {}, taps={ECHO: make_tap})
    ch = channel_factory(relay.socket_path)
    payload = os.urandom(300_000)  # several DATA frames each way
    assert unary(ch)(payload, timeout=5) == payload
    deadline = time.monotonic() + 5
    while not seen and time.monotonic() < deadline:
        time.sleep(0.01)
    assert started == ["call"]
    assert seen == [(payload, Response(status=0, details="", message=payload))]
    assert [r.method for r in upstream.records] == [ECHO]  # passed through as it came
    assert unary(ch, "/test.Svc/Other")(b"ok", timeout=5) == b"ok"
    assert len(seen) == 1  # other methods are not tapped


def test_on_response_with_large_response(
    upstream: FakeUpstream,
    relay_factory: Callable[..., RelayThread],
    channel_factory: Callable[[str], grpc.Channel],
) -> None:
    sizes: list[int] = []

    async def hook(response: Response) -> None:
        assert response.message is not None
        sizes.append(len(response.message))

    async def intercept(call: Call) -> Forward:
        return Forward(call.message, on_response=hook)

    relay = relay_factory(lambda _p: upstream.path, {ECHO: intercept})
    payload = os.urandom(3 << 20)
    assert unary(channel_factory(relay.socket_path))(payload, timeout=30) == payload
    assert sizes == [len(payload)]


def test_on_response_sees_a_failed_call(
    upstream: FakeUpstream,
    relay_factory: Callable[..., RelayThread],
    channel_factory: Callable[[str], grpc.Channel],
) -> None:
    seen: list[Response] = []
    fail = "/test.Svc/Fail"

    async def hook(response: Response) -> None:
        seen.append(response)

    async def intercept(call: Call) -> Forward:
        return Forward(call.message, on_response=hook)

    relay = relay_factory(lambda _p: upstream.path, {fail: intercept})
    with pytest.raises(grpc.RpcError) as err:
        unary(channel_factory(relay.socket_path), fail)("gone: é".encode(), timeout=5)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert err.value.details() == "gone: é"
    assert seen == [
        Response(status=grpc.StatusCode.NOT_FOUND.value[0], details="gone: é", message=None)
    ]


def test_on_response_sees_an_unreachable_upstream(
    workdir: str,
    relay_factory: Callable[..., RelayThread],
    channel_factory: Callable[[str], grpc.Channel],
) -> None:
    seen: list[Response] = []
    missing = os.path.join(workdir, "missing.sock")

    async def hook(response: Response) -> None:
        seen.append(response)

    async def intercept(call: Call) -> Forward:
        return Forward(call.message, on_response=hook)

    relay = relay_factory(lambda _p: missing, {ECHO: intercept})
    with pytest.raises(grpc.RpcError) as err:
        unary(channel_factory(relay.socket_path))(b"x", timeout=5)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    assert missing in err.value.details()
    assert len(seen) == 1 and seen[0].status == grpc.StatusCode.UNAVAILABLE.value[0]
    assert missing in seen[0].details and seen[0].message is None


def test_on_response_that_raises_fails_the_call(
    upstream: FakeUpstream,
    relay_factory: Callable[..., RelayThread],
    channel_factory: Callable[[str], grpc.Channel],
) -> None:
    async def hook(response: Response) -> None:
        raise RuntimeError("could not persist state")

    async def intercept(call: Call) -> Forward:
        return Forward(call.message, on_response=hook)

    relay = relay_factory(lambda _p: upstream.path, {ECHO: intercept})
    with pytest.raises(grpc.RpcError) as err:
        unary(channel_factory(relay.socket_path))(b"x", timeout=5)
    assert err.value.code() == grpc.StatusCode.INTERNAL
    assert "could not persist state" in err.value.details()


def test_interceptor_that_raises_gives_internal(
    upstream: FakeUpstream,
    relay_factory: Callable[..., RelayThread],
    channel_factory: Callable[[str], grpc.Channel],
) -> None:
    async def broken(call: Call) -> Forward:
        raise ValueError("bad cpuset annotation")

    relay = relay_factory(lambda _p: upstream.path, {ECHO: broken})
    ch = channel_factory(relay.socket_path)
    with pytest.raises(grpc.RpcError) as err:
        unary(ch)(b"x", timeout=5)
    assert err.value.code() == grpc.StatusCode.INTERNAL
    assert err.value.details() == "bad cpuset annotation"
    assert upstream.records == []
    assert unary(ch, "/test.Svc/Other")(b"still fine", timeout=5) == b"still fine"


def test_slow_interceptor_does_not_block_other_calls(
    upstream: FakeUpstream,
    relay_factory: Callable[..., RelayThread],
    channel_factory: Callable[[str], grpc.Channel],
) -> None:
    release = threading.Event()

    async def slow(call: Call) -> Forward:
        while not release.is_set():
            await asyncio.sleep(0.01)
        return Forward(call.message)

    relay = relay_factory(lambda _p: upstream.path, {ECHO: slow})
    ch = channel_factory(relay.socket_path)
    held = [unary(ch).future(b"held-%d" % i, timeout=20) for i in range(3)]
    start = time.monotonic()
    for i in range(20):
        assert unary(ch, "/test.Svc/Other")(b"%d" % i, timeout=5) == b"%d" % i
    assert time.monotonic() - start < 3.0
    assert not any(f.done() for f in held)
    release.set()
    assert [f.result() for f in held] == [b"held-%d" % i for i in range(3)]


def test_compressed_request_to_intercepted_method_is_refused(
    upstream: FakeUpstream,
    relay_factory: Callable[..., RelayThread],
    channel_factory: Callable[[str], grpc.Channel],
) -> None:
    calls: list[Call] = []

    async def intercept(call: Call) -> Forward:
        calls.append(call)
        return Forward(call.message)

    relay = relay_factory(lambda _p: upstream.path, {ECHO: intercept})
    ch = channel_factory(relay.socket_path)
    with pytest.raises(grpc.RpcError) as err:
        unary(ch)(b"z" * 1000, timeout=5, compression=grpc.Compression.Gzip)
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert "compressed" in err.value.details()
    assert calls == [] and upstream.records == []
    # Compressed calls to other methods pass through untouched.
    other = unary(ch, "/test.Svc/Other")
    assert other(b"z" * 1000, timeout=5, compression=grpc.Compression.Gzip) == b"z" * 1000


def test_client_cancel_while_intercepting(
    upstream: FakeUpstream,
    relay_factory: Callable[..., RelayThread],
    channel_factory: Callable[[str], grpc.Channel],
) -> None:
    entered = threading.Event()
    release = threading.Event()
    told: list[Response] = []

    async def hook(response: Response) -> None:
        told.append(response)

    async def slow(call: Call) -> Forward:
        entered.set()
        while not release.is_set():
            await asyncio.sleep(0.01)
        return Forward(call.message, on_response=hook)

    relay = relay_factory(lambda _p: upstream.path, {ECHO: slow})
    ch = channel_factory(relay.socket_path)
    future = unary(ch).future(b"x", timeout=20)
    assert entered.wait(5)
    future.cancel()
    assert relay.wait_idle()  # the relay has seen the client's RST_STREAM
    release.set()
    time.sleep(0.2)
    assert upstream.records == []  # the call was abandoned, so it never went upstream
    # ...and the hook heard so: whatever the interceptor set aside can be given back.
    assert [r.status for r in told] == [grpc.StatusCode.CANCELLED.value[0]]
    assert unary(ch, "/test.Svc/Other")(b"ok", timeout=5) == b"ok"


# --------------------------------------------------------------------------- failures


def test_upstream_down_answers_unavailable_promptly(
    workdir: str,
    relay_factory: Callable[..., RelayThread],
    channel_factory: Callable[[str], grpc.Channel],
) -> None:
    missing = os.path.join(workdir, "nobody.sock")
    relay = relay_factory(lambda _p: missing)
    stub = unary(channel_factory(relay.socket_path))
    for _ in range(3):  # every call tries again, and fails at once
        start = time.monotonic()
        with pytest.raises(grpc.RpcError) as err:
            stub(b"x", timeout=10)
        assert time.monotonic() - start < 1.0
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert missing in err.value.details()


def test_upstream_restarted(
    upstream: FakeUpstream, relay: RelayThread, channel: grpc.Channel
) -> None:
    stub = unary(channel)
    assert stub(b"before", timeout=5) == b"before"
    upstream.stop()
    with pytest.raises(grpc.RpcError) as err:
        stub(b"while down", timeout=5)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    upstream.start()
    for i in range(5):
        assert stub(b"after-%d" % i, timeout=5) == b"after-%d" % i


class _DyingUpstream:
    """An upstream that accepts a connection, reads a little and then drops it."""

    def __init__(self, path: str) -> None:
        import socket

        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return
        conn.recv(65536)
        time.sleep(0.2)
        conn.close()

    def close(self) -> None:
        self.sock.close()


def test_upstream_connection_dies_mid_call(
    workdir: str,
    relay_factory: Callable[..., RelayThread],
    channel_factory: Callable[[str], grpc.Channel],
) -> None:
    path = os.path.join(workdir, "dying.sock")
    dying = _DyingUpstream(path)
    try:
        relay = relay_factory(lambda _p: path)
        start = time.monotonic()
        with pytest.raises(grpc.RpcError) as err:
            unary(channel_factory(relay.socket_path))(b"x", timeout=10)
        assert time.monotonic() - start < 2.0
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert path in err.value.details()
    finally:
        dying.close()


def test_in_flight_calls_fail_when_the_upstream_stops(
    upstream: FakeUpstream, relay: RelayThread, channel: grpc.Channel
) -> None:
    calls = [unary(channel, "/test.Svc/Slow").future(b"10", timeout=20) for _ in range(3)]
    deadline = time.monotonic() + 5
    while len(upstream.records) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    start = time.monotonic()
    upstream.stop()
    for c in calls:
        with pytest.raises(grpc.RpcError) as err:
            c.result(timeout=5)
        # grpcio cancels its in-flight handlers on stop; either way the client is told at once.
        assert err.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
    assert time.monotonic() - start < 3.0


def test_client_disconnect_cancels_upstream_calls(
    upstream: FakeUpstream, relay: RelayThread
) -> None:
    ch = grpc.insecure_channel(f"unix:{relay.socket_path}")
    call = unary(ch, "/test.Svc/Slow").future(b"10", timeout=20)
    deadline = time.monotonic() + 5
    while not upstream.records and time.monotonic() < deadline:
        time.sleep(0.01)
    assert upstream.records[0].started.wait(5)
    ch.close()
    assert upstream.records[0].cancelled.wait(3)
    assert call.done()


# --------------------------------------------------------------------------- server lifecycle


def test_socket_file_mode_parent_dir_and_stale_file(
    workdir: str,
    upstream: FakeUpstream,
    relay_factory: Callable[..., RelayThread],
    channel_factory: Callable[[str], grpc.Channel],
) -> None:
    import socket

    name = "sub/dir/relay.sock"
    path = os.path.join(workdir, name)
    os.makedirs(os.path.dirname(path))
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(path)  # a socket file nobody listens on, as a crashed relay leaves behind
    stale.close()
    relay = relay_factory(lambda _p: upstream.path, name=name)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o660
    assert unary(channel_factory(relay.socket_path))(b"x", timeout=5) == b"x"


def test_graceful_close_lets_calls_finish(
    upstream: FakeUpstream, relay: RelayThread, channel: grpc.Channel
) -> None:
    assert unary(channel)(b"warm", timeout=5) == b"warm"
    call = unary(channel, "/test.Svc/Slow").future(b"0.5", timeout=10)
    deadline = time.monotonic() + 5
    while len(upstream.records) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    closing = futures.ThreadPoolExecutor(1).submit(relay.close, 5.0)
    assert call.result(timeout=10) == b"slept"
    closing.result(timeout=10)
    assert not os.path.exists(relay.socket_path)


def test_close_grace_expires(
    upstream: FakeUpstream, relay: RelayThread, channel: grpc.Channel
) -> None:
    call = unary(channel, "/test.Svc/Slow").future(b"10", timeout=20)
    deadline = time.monotonic() + 5
    while not upstream.records and time.monotonic() < deadline:
        time.sleep(0.01)
    start = time.monotonic()
    relay.close(grace=0.3)
    assert time.monotonic() - start < 3.0
    with pytest.raises(grpc.RpcError) as err:
        call.result(timeout=5)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
