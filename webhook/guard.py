"""Bounds on what one peer may hold of the server: connections, time to send a request, memory.

uvicorn has no limit on the time a client takes to send a request: a connection that sends
half a header and stalls is kept for ever, and 200 of them stay open; on httptools, no limit on
the size of a request's head either. The event loop accepts every connection and gives each
TLS connection a 256 KiB read buffer before the handshake, so a few hundred idle sockets cost
the memory the Deployment has. Here, for the webhook and the benchmark's bare app alike
(`webhook.server.run`, on uvloop):

- `RequestDeadline`: uvicorn's HTTP/1.1 protocol on httptools with a deadline from a connection's
  first byte (or from its opening) to the end of the request's body; a peer that misses it is
  cut off. A request head over MAX_HEAD_BYTES is answered 431 and the connection closed.
- `ConnectionGate`: at most `max_connections` at once, counting those still in their TLS
  handshake; one more is closed on accept, before any handshake work or buffer
  (`GatedListener` accepts, asks the gate, then starts TLS: the same on asyncio and uvloop).
- `shrink_tls_read_buffer`: asyncio's per-connection TLS read buffer cut to one TLS record
  (uvloop's is reserved, not touched, and resident only as far as reads fill it).
- `_Coalescing`: a response's head and body written in one TLS record and one send.
"""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import contextlib
import logging
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger("webhook.server")

# From a request's first byte to its last (head and body): the API server gives a webhook at
# most 30 s, 10 by default, and ours 5 (deploy/webhook); it sends the whole review at once.
REQUEST_READ_SECONDS = 10.0
TLS_HANDSHAKE_SECONDS = 10.0
# Closing a TLS connection waits this long for the peer's close_notify (asyncio: 30 s).
TLS_SHUTDOWN_SECONDS = 5.0
# Connections at once, handshakes included. An API server keeps a few keep-alive connections
# per replica; each connection costs ~70 KiB (TLS state and buffers, with the buffer shrunk).
MAX_CONNECTIONS = 256
# A TLS record carries at most 16 KiB: a larger read buffer is never filled by one read.
TLS_READ_BUFFER = 17 * 1024
_REFUSAL_LOG_SECONDS = 10.0
# A request's line and headers: the API server sends a few hundred bytes (h11's limit is 16 KiB).
MAX_HEAD_BYTES = 16 * 1024
_HEAD_TOO_LARGE = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: 30\r\nconnection: close\r\n\r\nrequest head over 16384 bytes\n"
)


def shrink_tls_read_buffer() -> None:
    """asyncio allocates `SSLProtocol.max_size` (256 KiB) per TLS connection, touched at once:
    300 idle sockets were 90 MiB. One record's worth reads the same data in the same calls."""
    if getattr(asyncio.sslproto.SSLProtocol, "max_size", 0) > TLS_READ_BUFFER:
        asyncio.sslproto.SSLProtocol.max_size = TLS_READ_BUFFER


class _Refused(asyncio.Protocol):
    """A connection over the limit: cut as soon as it is accepted, before any TLS work.
    (A protocol factory that raised would do the same on asyncio, but stops uvloop's server
    from accepting at all.)"""

    def connection_made(self, transport: Any) -> None:  # uvloop's are no asyncio.Transport
        transport.abort()


class ConnectionGate:
    """Counts connections from accept to close; refuses one over `max_connections`."""

    def __init__(
        self,
        established: set[Any],
        *,
        max_connections: int = MAX_CONNECTIONS,
        handshake_seconds: float = TLS_HANDSHAKE_SECONDS,
    ) -> None:
        self.established = established  # uvicorn's: protocols add themselves once connected
        self.max_connections = max_connections
        self.handshake_seconds = handshake_seconds
        self.handshaking: set[asyncio.Task[Any]] = set()  # accepted, TLS handshake not done
        self.refused = 0
        self._logged_at = -_REFUSAL_LOG_SECONDS

    def open_connections(self) -> int:
        return len(self.handshaking) + len(self.established)

    def admit(self) -> bool:
        """Whether one more connection may be served now; counts and logs a refusal."""
        if self.open_connections() < self.max_connections:
            return True
        self.refused += 1
        now = time.monotonic()
        if now - self._logged_at >= _REFUSAL_LOG_SECONDS:
            self._logged_at = now
            log.warning(
                "connection refused: %d connections open (the limit)",
                self.max_connections,
                extra={"fields": {"refused_total": self.refused}},
            )
        return False

    def wrap(self, factory: Callable[[], Any]) -> Callable[[], Any]:
        """For a listener without TLS: the factory, or a protocol that cuts the connection."""
        return lambda: factory() if self.admit() else _Refused()

    async def listen(
        self, sock: socket.socket, factory: Callable[[], Any], tls: ssl.SSLContext
    ) -> GatedListener:
        return GatedListener(asyncio.get_running_loop(), sock, factory, tls, self)


class GatedListener:
    """A TLS listener that asks the gate before any TLS work: accepted sockets over the limit
    are closed at once, the others handed to `loop.connect_accepted_socket` with our handshake
    and shutdown timeouts (the same on asyncio and uvloop). Looks to uvicorn like the server
    `loop.create_server` returns."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        factory: Callable[[], Any],
        tls: ssl.SSLContext,
        gate: ConnectionGate,
    ) -> None:
        self.loop, self.sock, self.factory, self.tls, self.gate = loop, sock, factory, tls, gate
        self.sockets = [sock]
        sock.setblocking(False)
        loop.add_reader(sock.fileno(), self._accept)
        self._serving = True

    def _accept(self) -> None:
        for _ in range(64):  # then let the loop run the rest
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # out of file descriptors, and the like: try again later
                log.warning("accept failed: %s", exc)
                return
            if not self.gate.admit():
                conn.close()
                continue
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            task = self.loop.create_task(self._handshake(conn))
            self.gate.handshaking.add(task)
            task.add_done_callback(self.gate.handshaking.discard)

    async def _handshake(self, conn: socket.socket) -> None:
        # On a failed handshake the loop has closed the connection; nothing was served on it.
        with contextlib.suppress(TimeoutError, OSError, ssl.SSLError):
            await self.loop.connect_accepted_socket(
                self.factory,
                conn,
                ssl=self.tls,
                ssl_handshake_timeout=self.gate.handshake_seconds,
                ssl_shutdown_timeout=TLS_SHUTDOWN_SECONDS,
            )

    def close(self) -> None:
        if self._serving:
            self._serving = False
            self.loop.remove_reader(self.sock.fileno())
            self.sock.close()
            for task in list(self.gate.handshaking):
                task.cancel()

    def is_serving(self) -> bool:
        return self._serving

    async def wait_closed(self) -> None:
        return None


class _Coalescing:
    """A transport whose writes made in one turn of the event loop go out as one: uvicorn
    writes a response's head and body separately, which over TLS is two records and two
    sends; here they are one of each (a review's answer is a few hundred bytes)."""

    __slots__ = ("_buffer", "_loop", "_transport")

    def __init__(self, transport: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._buffer: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not self._buffer:
            self._loop.call_soon(self._flush)
        self._buffer.append(data)

    def writelines(self, chunks: Any) -> None:
        for chunk in chunks:
            self.write(chunk)

    def _flush(self) -> None:
        if self._buffer:
            data = b"".join(self._buffer)
            self._buffer.clear()
            if not self._transport.is_closing():
                self._transport.write(data)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def abort(self) -> None:
        self._buffer.clear()
        self._transport.abort()

    def get_write_buffer_size(self) -> int:
        return int(self._transport.get_write_buffer_size()) + sum(map(len, self._buffer))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class RequestDeadline(HttpToolsProtocol):
    """uvicorn's httptools protocol, with REQUEST_READ_SECONDS to send each request, head and
    body, and at most MAX_HEAD_BYTES of head.

    The clock starts when the connection is made (after the TLS handshake) and, on a kept-alive
    connection, with the first byte of the next request (until then uvicorn's keep-alive
    timeout applies); it stops once the request has been read whole.
    """

    request_read_seconds = REQUEST_READ_SECONDS
    max_head_bytes = MAX_HEAD_BYTES

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # When the request being read must be whole (loop time), None when none is. One timer
        # per connection checks it: arming and disarming for each request only set this (a
        # timer made and cancelled per request cost ~3 us of the ~100 a review takes).
        self._read_deadline: float | None = None
        self._read_timer: asyncio.TimerHandle | None = None
        self._between = True  # no request begun since the last one was read whole
        self._head_bytes = 0  # bytes received while a head is being read

    def _arm(self) -> None:
        if self._read_deadline is None:
            self._read_deadline = self.loop.time() + self.request_read_seconds
            if self._read_timer is None:
                self._read_timer = self.loop.call_at(self._read_deadline, self._check_deadline)

    def _disarm(self) -> None:
        self._read_deadline = None  # the timer, when it fires, finds nothing to cut

    def _check_deadline(self) -> None:
        self._read_timer = None
        deadline = self._read_deadline
        if deadline is None:
            return
        if self.loop.time() < deadline:  # a later request's: wait for it
            self._read_timer = self.loop.call_at(deadline, self._check_deadline)
            return
        self._read_deadline = None
        if not self.transport.is_closing():
            # abort, not close: a peer that stalls would not answer a TLS close_notify either.
            self.transport.abort()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(_Coalescing(transport, self.loop))  # type: ignore[arg-type]
        self._arm()
        self._between = False

    def data_received(self, data: bytes) -> None:
        if self._between:
            self._between = False
            self._head_bytes = 0
            self._arm()  # the first bytes of a request on a kept-alive connection
        in_head = self._head_bytes >= 0
        super().data_received(data)
        if in_head and self._head_bytes >= 0 and not self._between:
            # The head is still not whole: every byte of `data` was head (httptools keeps a
            # partial header line in memory until it ends).
            self._head_bytes += len(data)
            if self._head_bytes > self.max_head_bytes and not self.transport.is_closing():
                self._disarm()
                self.transport.write(_HEAD_TOO_LARGE)
                self.transport.close()

    def on_headers_complete(self) -> None:
        self._head_bytes = -1  # the body's size is the app's to bound
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._disarm()  # read whole
        self._between = True
        self._head_bytes = 0

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None
        super().connection_lost(exc)
