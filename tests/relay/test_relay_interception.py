"""The HTTP/2 relay end to end, intercepted methods: Forward, AnswerHere, on_response, observers and
taps, with a real grpcio client and a real grpcio upstream."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable

import grpc
import pytest
from relay_harness import ECHO, FakeUpstream, RelayThread, unary

from enforcer.relay.h2 import AnswerHere, Call, Forward, Response

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
