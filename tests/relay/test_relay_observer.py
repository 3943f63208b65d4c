"""The relay's per-call observer (what the enforcer's CRI call metrics are built on): told once
per finished call, with the status the client got, whoever produced it."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

import grpc
import pytest
from relay_harness import FakeUpstream, RelayThread

from enforcer.relay.h2 import AnswerHere, Call, Forward

Seen = list[tuple[str, int, float]]


@pytest.fixture
def seen() -> Seen:
    return []


def observed_relay(
    relay_factory: Callable[..., RelayThread],
    route: Callable[[str], str],
    seen: Seen,
    intercepts: dict | None = None,
) -> RelayThread:
    relay = relay_factory(route, intercepts)
    lock = threading.Lock()

    def observe(method: str, code: int, seconds: float) -> None:
        with lock:
            seen.append((method, code, seconds))

    # Set before any client connects: connections take the server's observer when accepted.
    relay.server.observer = observe
    return relay


def wait_seen(seen: Seen, n: int, timeout: float = 5.0) -> Seen:
    deadline = time.monotonic() + timeout
    while len(seen) < n and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)  # anything extra would show up now
    return list(seen)


def test_each_call_is_reported_once_with_its_status(
    relay_factory: Callable[..., RelayThread],
    upstream: FakeUpstream,
    channel_factory: Callable[[str], grpc.Channel],
    seen: Seen,
) -> None:
    relay = observed_relay(relay_factory, lambda _p: upstream.path, seen)
    ch = channel_factory(relay.socket_path)
    assert ch.unary_unary("/test.Svc/Echo")(b"hi") == b"hi"
    with pytest.raises(grpc.RpcError):
        ch.unary_unary("/test.Svc/Fail")(b"no")
    with pytest.raises(grpc.RpcError):
        ch.unary_unary("/test.Svc/Nothing")(b"")
    assert list(ch.unary_stream("/test.Svc/ServerStream")(b"3")) == [b"msg-0", b"msg-1", b"msg-2"]
    got = wait_seen(seen, 4)
    assert [(m, c) for m, c, _ in got] == [
        ("/test.Svc/Echo", grpc.StatusCode.OK.value[0]),
        ("/test.Svc/Fail", grpc.StatusCode.NOT_FOUND.value[0]),
        ("/test.Svc/Nothing", grpc.StatusCode.UNIMPLEMENTED.value[0]),
        ("/test.Svc/ServerStream", grpc.StatusCode.OK.value[0]),
    ]
    assert all(0 < s < 5 for _, _, s in got)


def test_the_relays_own_answers_are_reported(
    relay_factory: Callable[..., RelayThread],
    upstream: FakeUpstream,
    channel_factory: Callable[[str], grpc.Channel],
    workdir: str,
    seen: Seen,
) -> None:
    async def refuse(call: Call) -> Forward | AnswerHere:
        return AnswerHere(grpc.StatusCode.RESOURCE_EXHAUSTED, "no CPUs")

    async def forward(call: Call) -> Forward | AnswerHere:
        return Forward(call.message)

    missing = os.path.join(workdir, "missing.sock")
    relay = observed_relay(
        relay_factory,
        lambda p: missing if p.endswith("Away") else upstream.path,
        seen,
        {"/test.Svc/Refused": refuse, "/test.Svc/Forwarded": forward},
    )
    ch = channel_factory(relay.socket_path)
    with pytest.raises(grpc.RpcError):
        ch.unary_unary("/test.Svc/Refused")(b"x")
    assert ch.unary_unary("/test.Svc/Forwarded")(b"y") == b"y"
    with pytest.raises(grpc.RpcError):
        ch.unary_unary("/test.Svc/Away")(b"z")
    got = sorted((m, c) for m, c, _ in wait_seen(seen, 3))
    assert got == [
        ("/test.Svc/Away", grpc.StatusCode.UNAVAILABLE.value[0]),
        ("/test.Svc/Forwarded", grpc.StatusCode.OK.value[0]),
        ("/test.Svc/Refused", grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]),
    ]


def test_a_cancelled_call_is_reported(
    relay_factory: Callable[..., RelayThread],
    upstream: FakeUpstream,
    channel_factory: Callable[[str], grpc.Channel],
    seen: Seen,
) -> None:
    relay = observed_relay(relay_factory, lambda _p: upstream.path, seen)
    ch = channel_factory(relay.socket_path)
    future = ch.unary_unary("/test.Svc/Slow").future(b"5")
    deadline = time.monotonic() + 5
    while not upstream.records and time.monotonic() < deadline:
        time.sleep(0.01)
    future.cancel()
    got = wait_seen(seen, 1)
    assert [(m, c) for m, c, _ in got] == [("/test.Svc/Slow", grpc.StatusCode.CANCELLED.value[0])]


def test_a_failing_observer_does_not_break_the_call(
    relay_factory: Callable[..., RelayThread],
    upstream: FakeUpstream,
    channel_factory: Callable[[str], grpc.Channel],
) -> None:
    relay = relay_factory(lambda _p: upstream.path)

    def broken(method: str, code: int, seconds: float) -> None:
        raise RuntimeError("observer bug")

    relay.server.observer = broken
    ch = channel_factory(relay.socket_path)
    for _ in range(3):
        assert ch.unary_unary("/test.Svc/Echo")(b"ok") == b"ok"
