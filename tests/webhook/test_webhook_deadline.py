"""The time to send a request, on kept-alive connections: each request is timed from its own
first byte (one timer per connection checks it), an idle connection is not cut by it."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn

from webhook.guard import RequestDeadline

DEADLINE = 0.6
REQUEST = b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"


class ShortDeadline(RequestDeadline):
    request_read_seconds = DEADLINE


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    more = True
    while more:
        more = (await receive()).get("more_body", False)
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]}
    )
    await send({"type": "http.response.body", "body": b"ok"})


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    config = uvicorn.Config(
        app, loop="uvloop", http=ShortDeadline, lifespan="off", log_config=None,
        timeout_keep_alive=30,
    )  # fmt: skip
    server = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])))
    thread.start()
    while not server.started:
        time.sleep(0.01)
    yield sock.getsockname()[1]
    server.should_exit = True
    thread.join(10)


def _connect(port: int) -> socket.socket:
    conn = socket.create_connection(("127.0.0.1", port))
    conn.settimeout(5)
    return conn


def _ask(conn: socket.socket) -> None:
    conn.sendall(REQUEST)
    answer = b""
    while not answer.endswith(b"ok"):
        chunk = conn.recv(4096)
        assert chunk, "closed"
        answer += chunk
    assert answer.startswith(b"HTTP/1.1 200")


def _seconds_until_closed(conn: socket.socket) -> float:
    start = time.monotonic()
    while conn.recv(4096):
        pass
    return time.monotonic() - start


def test_a_later_request_that_stalls_is_cut_at_its_own_deadline(port: int) -> None:
    conn = _connect(port)
    _ask(conn)  # the connection's timer starts with its opening
    time.sleep(DEADLINE * 0.6)
    _ask(conn)
    conn.sendall(REQUEST[:20])  # half a head, then nothing
    stalled_at = time.monotonic()
    waited = _seconds_until_closed(conn)
    total = time.monotonic() - stalled_at
    assert DEADLINE * 0.8 <= total < DEADLINE + 1.0, (waited, total)


def test_an_idle_kept_alive_connection_is_not_cut_by_the_request_deadline(port: int) -> None:
    conn = _connect(port)
    for _ in range(3):
        _ask(conn)
        time.sleep(DEADLINE * 1.5)  # idle: the keep-alive timeout's, not the deadline's
    _ask(conn)
    conn.close()


def test_a_request_sent_slowly_but_within_its_deadline_is_answered(port: int) -> None:
    conn = _connect(port)
    _ask(conn)
    time.sleep(DEADLINE * 0.7)
    # The connection's timer (from its opening) fires while this request is read: it waits
    # for the request's own deadline instead.
    for i in range(0, len(REQUEST), 10):
        conn.sendall(REQUEST[i : i + 10])
        time.sleep(DEADLINE * 0.08)
    answer = conn.recv(4096)
    assert answer.startswith(b"HTTP/1.1 200")
