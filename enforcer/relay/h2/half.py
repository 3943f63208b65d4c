"""One stream as it exists on one connection (``Half``), and the small Protocols by which it
reaches its call, its connection and the server without importing them (they import this).

A call (``streams.Stream``) has a half on each connection; a connection (``connection.Endpoint``)
holds the halves of its streams by stream id; the server (``server.RelayServer``) writes the
connections out and runs the calls' tasks.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from enforcer.relay.h2.framing import window_update_frame
from enforcer.relay.h2.header_codec import HeaderList
from enforcer.relay.h2.windows import CONN_CREDIT_AT, STREAM_CREDIT_AT, STREAM_WINDOW


class Link(Protocol):
    """A connection, as the calls with a half on it use it (``connection.Endpoint``)."""

    peer_initial_window: int
    recv_unacked: int

    def emit(self, data: bytes | memoryview) -> None: ...

    def credit_connection(self, n: int) -> None: ...

    def send_headers(self, h: Half, headers: HeaderList, end: bool) -> None: ...

    def send_data(
        self, h: Half, data: bytes, end: bool, *, own: bool = False, raw: bytes | None = None
    ) -> None: ...

    def clear_queue(self, h: Half) -> None: ...

    def reset(self, h: Half, code: int) -> None: ...

    def forget(self, h: Half) -> None: ...

    def closed_remote(self, h: Half) -> None: ...


class CallPort(Protocol):
    """A call, as its connections and the server use it (``streams.Stream``)."""

    method: str
    started: float
    status: int
    held: int
    down: Half

    def on_headers(self, h: Half, headers: HeaderList, end: bool) -> None: ...

    def on_data(self, h: Half, data: bytes, end: bool, raw: bytes | None = None) -> None: ...

    def on_reset(self, h: Half, code: int) -> None: ...

    def fail(self, code: int, message: str) -> None: ...

    def client_gone(self, code: int) -> None: ...

    def release_held(self) -> None: ...


class Relay(Protocol):
    """The server, as calls and connections use it (``server.RelayServer``)."""

    held: int  # bytes all calls hold in the relay (streams.MAX_HELD_TOTAL)

    def flush(self) -> None: ...

    def spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]: ...

    def after_writes(self, work: Callable[[], None]) -> None: ...

    def finished(self, stream: CallPort) -> None: ...


# The queue of every half that never had to wait: empty, and with no ``append`` (``Half.park``
# gives a half its own queue).
NO_QUEUE: deque[tuple[int, object, bool]] = ()  # type: ignore[assignment]


class Half:
    """One stream as it exists on one connection: our sending state and our receiving state."""

    __slots__ = (
        "conn",
        "headers_sent",
        "local_ended",
        "peer",
        "queue",
        "recv_window",
        "remote_ended",
        "sid",
        "stream",
        "unacked",
        "window",
    )

    def __init__(self, conn: Link, stream: CallPort, sid: int) -> None:
        self.conn = conn
        self.stream = stream
        self.sid = sid  # 0 until an upstream stream is opened
        self.peer: Half | None = None  # the same stream on the other connection
        self.window = conn.peer_initial_window  # send window
        # What waits for window or for the stream's opening; most calls never wait, and share
        # one empty queue until they do (``park``).
        self.queue: deque[tuple[int, object, bool]] = NO_QUEUE
        self.local_ended = False  # we sent END_STREAM or RST_STREAM
        self.remote_ended = False  # the peer sent END_STREAM or RST_STREAM
        self.headers_sent = False
        self.recv_window = STREAM_WINDOW
        self.unacked = 0  # received bytes passed on but not yet credited back

    def park(self, item: tuple[int, object, bool]) -> None:
        """Queue ``item`` (in order after what already waits)."""
        queue = self.queue
        if queue is NO_QUEUE:
            queue = self.queue = deque()
        queue.append(item)

    def credit(self, n: int) -> None:
        """``n`` received bytes were passed on (or consumed): re-open our receive windows."""
        conn = self.conn
        unacked = conn.recv_unacked + n
        if unacked < CONN_CREDIT_AT:  # (Endpoint.credit_connection, inlined)
            conn.recv_unacked = unacked
        else:
            conn.credit_connection(n)
        if self.remote_ended:
            return
        unacked = self.unacked + n
        if unacked >= STREAM_CREDIT_AT:
            self.conn.emit(window_update_frame(self.sid, unacked))
            self.recv_window += unacked
            unacked = 0
        self.unacked = unacked
