"""Bounds on what one peer may hold of the server: connections, time to send a request, memory.

uvicorn (on h11) has no limit on the time a client takes to send a request: a connection that
sends half a header and stalls is kept for ever, and 200 of them stay open. asyncio accepts
every connection and gives each TLS connection a 256 KiB read buffer before the handshake, so
a few hundred idle sockets cost the memory the Deployment has. Here, for the webhook and the
benchmark's bare app alike (`webhook.server.run`):

- `RequestDeadline`: uvicorn's HTTP/1.1 protocol with a deadline from a connection's first byte
  (or from its opening) to the end of the request's body; a peer that misses it is cut off.
- `ConnectionGate`: at most `max_connections` at once, counting those still in their TLS
  handshake; one more is closed on accept, before any handshake work or buffer.
- `shrink_tls_read_buffer`: asyncio's per-connection TLS read buffer cut to one TLS record.
"""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

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


def shrink_tls_read_buffer() -> None:
    """asyncio allocates `SSLProtocol.max_size` (256 KiB) per TLS connection, touched at once:
    300 idle sockets were 90 MiB. One record's worth reads the same data in the same calls."""
    if getattr(asyncio.sslproto.SSLProtocol, "max_size", 0) > TLS_READ_BUFFER:
        asyncio.sslproto.SSLProtocol.max_size = TLS_READ_BUFFER


class TooManyConnections(ConnectionError):
    """Raised by the gate's protocol factory: asyncio then closes the accepted socket."""


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
        # Accepted, not yet connected (in the TLS handshake): protocol -> when asyncio gives up
        # on its handshake. One whose handshake failed is never told: it expires here then.
        self._pending: OrderedDict[Any, float] = OrderedDict()
        self.refused = 0
        self._logged_at = -_REFUSAL_LOG_SECONDS

    def open_connections(self) -> int:
        now = time.monotonic()
        while self._pending:
            protocol, deadline = next(iter(self._pending.items()))
            if deadline > now and protocol not in self.established:
                break
            del self._pending[protocol]
        for protocol in [p for p in self._pending if p in self.established]:
            del self._pending[protocol]
        return len(self._pending) + len(self.established)

    def wrap(self, factory: Callable[[], Any]) -> Callable[[], Any]:
        def gated() -> Any:
            if self.open_connections() >= self.max_connections:
                self.refused += 1
                now = time.monotonic()
                if now - self._logged_at >= _REFUSAL_LOG_SECONDS:
                    self._logged_at = now
                    log.warning(
                        "connection refused: %d connections open (the limit)",
                        self.max_connections,
                        extra={"fields": {"refused_total": self.refused}},
                    )
                raise TooManyConnections(self.max_connections)
            protocol = factory()
            self._pending[protocol] = time.monotonic() + self.handshake_seconds + 0.5
            return protocol

        return gated


class RequestDeadline(H11Protocol):
    """uvicorn's h11 protocol, with REQUEST_READ_SECONDS to send each request, head and body.

    The clock starts when the connection is made (after the TLS handshake) and, on a kept-alive
    connection, with the first byte of the next request (until then uvicorn's keep-alive
    timeout applies); it stops once the request has been read whole.
    """

    request_read_seconds = REQUEST_READ_SECONDS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._read_deadline: asyncio.TimerHandle | None = None

    def _arm(self) -> None:
        if self._read_deadline is None:
            self._read_deadline = self.loop.call_later(self.request_read_seconds, self._expired)

    def _disarm(self) -> None:
        if self._read_deadline is not None:
            self._read_deadline.cancel()
            self._read_deadline = None

    def _expired(self) -> None:
        self._read_deadline = None
        if not self.transport.is_closing():
            # abort, not close: a peer that stalls would not answer a TLS close_notify either.
            self.transport.abort()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self.conn.their_state is h11.IDLE:
            self._arm()  # the first bytes of a request on a kept-alive connection
        super().data_received(data)
        if self.conn.their_state not in (h11.IDLE, h11.SEND_BODY):
            self._disarm()  # read whole (DONE), or the connection is ending

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)
