"""A connection accepted from kubelet, where the relay is the HTTP/2 server: ``Downstream``.

The client preface, new streams (routed, intercepted or tapped), draining, and losing the
connection. Each downstream connection opens, lazily, one upstream connection per upstream
socket its calls are routed to (``upstream``). Header blocks are decoded with the receiving
side's HPACK decoder and re-encoded for the other side with a stateless non-indexing encoder,
so the two sides' HPACK contexts are independent.

Bounds: at most MAX_CONNECTIONS connections, MAX_CONCURRENT_STREAMS open calls on each
(announced; one more is refused with REFUSED_STREAM, which gRPC clients retry), and the
relay's own holdings per connection (``streams.MAX_HELD``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Protocol

from enforcer.relay.h2.connection import Endpoint, Source
from enforcer.relay.h2.flow import Host
from enforcer.relay.h2.framing import (
    PREFACE,
    ConnectionError_,
    ErrorCode,
    FrameReader,
    Setting,
    StreamError,
    goaway_frame,
    rst_stream_frame,
)
from enforcer.relay.h2.grpc_wire import INTERNAL, UNAVAILABLE
from enforcer.relay.h2.half import Half
from enforcer.relay.h2.header_codec import HeaderList, SharedHeaders, request_method
from enforcer.relay.h2.intercept import Interceptor, Observer, Route, TapFactory
from enforcer.relay.h2.streams import Interception, Mode, Stream
from enforcer.relay.h2.upstream import Upstream

log = logging.getLogger(__name__)

# Calls open at once on one connection from kubelet. kubelet's exec probes (ExecSync) each hold
# a stream for the probe's timeout, so this is well above a full node's probes.
MAX_CONCURRENT_STREAMS = 1000
# Connections from kubelet (and crictl) at once; one more is closed as it is accepted.
MAX_CONNECTIONS = 128


class Server(Host, Protocol):
    """The listening server, as the connections it accepted use it (``server.RelayServer``)."""

    conns: set[Downstream]

    @property
    def route(self) -> Route: ...

    @property
    def intercepts(self) -> Mapping[str, Interceptor]: ...

    @property
    def taps(self) -> Mapping[str, TapFactory]: ...

    @property
    def observer(self) -> Observer | None: ...


class Downstream(Endpoint):
    """A connection accepted from kubelet: we are the HTTP/2 server."""

    role = "downstream"

    def __init__(self, relay: Server) -> None:
        super().__init__(relay)
        self.relay: Server = relay
        self.reader = FrameReader(preface=PREFACE)  # the client preface comes first
        self.observer = relay.observer
        self.upstreams: dict[str, Upstream] = {}
        self.draining = False
        self._goaway_sid = 0
        self.held = 0  # bytes its calls hold in the relay (streams.MAX_HELD)

    def _extra_settings(self) -> dict[int, int]:
        return {Setting.MAX_CONCURRENT_STREAMS: MAX_CONCURRENT_STREAMS}

    def _sources(self) -> list[Source]:
        # Itself too: a client that does not read its answers gets no more of its calls read.
        return [self, *self.upstreams.values()]

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        relay = self.relay
        if len(relay.conns) >= MAX_CONNECTIONS:
            log.warning("relay: %d connections already: one more refused", MAX_CONNECTIONS)
            self.closed = True
            transport.close()
            return
        relay.conns.add(self)
        self._start(transport)  # type: ignore[arg-type]
        self.relay.flush()

    def _on_header_list(self, sid: int, headers: HeaderList, end: bool) -> None:
        h = self.streams.get(sid)
        if h is not None:
            if h.remote_ended:
                raise StreamError(sid, ErrorCode.STREAM_CLOSED, "HEADERS after END_STREAM")
            if not end:
                raise StreamError(sid, ErrorCode.PROTOCOL_ERROR, "trailers without END_STREAM")
            h.stream.on_headers(h, headers, end)
            return
        if not sid & 1:
            raise ConnectionError_(ErrorCode.PROTOCOL_ERROR, f"client opened even stream {sid}")
        if sid <= self.last_peer_sid:
            return  # a stream we already closed (the block was decoded, to keep HPACK in step)
        self.last_peer_sid = sid
        if self.draining or len(self.streams) >= MAX_CONCURRENT_STREAMS:
            self.emit(rst_stream_frame(sid, ErrorCode.REFUSED_STREAM))
            return
        method = headers.method if type(headers) is SharedHeaders else request_method(headers)
        if method is None:
            raise StreamError(sid, ErrorCode.PROTOCOL_ERROR, "request without :path")
        stream = Stream(self.relay, method)
        if self.observer is not None:
            stream.started = time.monotonic()
        down = Half(self, stream, sid)
        stream.down = down
        self.streams[sid] = down
        if end:
            down.remote_ended = True
        interceptor = self.relay.intercepts.get(method)
        if interceptor is None:
            make_tap = self.relay.taps.get(method)
            if make_tap is not None:
                stream.mode = Mode.TAP
                stream.icpt = Interception(None, headers, 0.0)
                stream.tap = make_tap()
            self.open_upstream(stream, headers, end)
            return
        stream.mode = Mode.COLLECT
        stream.icpt = Interception(interceptor, headers, time.monotonic())
        if end:
            stream._collected()

    def open_upstream(self, stream: Stream, headers: HeaderList, end: bool) -> bool:
        """Route ``stream`` and open it upstream (now, or once the connection is up)."""
        try:
            target = self.relay.route(stream.method)
        except Exception as exc:
            log.exception("route(%r) failed", stream.method)
            stream.fail(INTERNAL, f"relay: no upstream for {stream.method}: {exc}")
            return False
        return self.upstream(target).open(stream, headers, end)

    def upstream(self, target: str) -> Upstream:
        """The current upstream connection to ``target``, started if there is none."""
        conn = self.upstreams.get(target)
        if conn is None or conn.closed or conn.going_away:
            conn = Upstream(self.relay, self, target)
            self.upstreams[target] = conn
            if self.writing_paused:
                conn.hold(self)
            conn.connect()
        return conn

    def _idle(self, sid: int) -> bool:
        return sid > self.last_peer_sid

    def ended_local(self, h: Half) -> None:
        h.local_ended = True
        self._resets.count = 0  # a call finished: resets before it were no flood
        if h.stream.status < 0 and self.observer is not None:
            h.stream.status = INTERNAL  # DATA ended the response, no trailers: gRPC's reading
        if not h.remote_ended:
            # Our response is complete while the client is still sending: ask it to stop
            # (RFC 9113 8.1), as gRPC servers do. Anything it still sends is ignored.
            self.emit(rst_stream_frame(h.sid, ErrorCode.NO_ERROR))
            h.remote_ended = True
        self.forget(h)

    def _half_failed(self, h: Half, exc: StreamError) -> None:
        h.stream.client_gone(ErrorCode.CANCEL)

    def headers_too_large(self, h: Half, size: int) -> None:
        """A response header block over the client's SETTINGS_MAX_HEADER_LIST_SIZE."""
        h.stream.fail(
            INTERNAL,
            f"relay: response headers of {size} bytes exceed the client's limit of "
            f"{self.peer_max_header_list}",
        )

    def forget(self, h: Half) -> None:
        if h.stream.held:
            h.stream.release_held()
        super().forget(h)

    def _stream_closed(self) -> None:
        if self.draining and not self.streams:
            self.close()

    def drain(self) -> None:
        """Graceful stop: GOAWAY now (no new streams), close when the last stream is done."""
        if self.closed or self.draining:
            return
        self.draining = True
        self.emit(goaway_frame(self.last_peer_sid, ErrorCode.NO_ERROR))
        if not self.streams:
            self.close()

    def abort(self, message: str) -> None:
        """Stop now: answer what is still running with UNAVAILABLE and close."""
        for h in list(self.streams.values()):
            h.stream.fail(UNAVAILABLE, message)
        self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._release_all()
        self.relay.conns.discard(self)
        for h in list(self.streams.values()):
            h.local_ended = h.remote_ended = True
            h.stream.release_held()
            h.stream.client_gone(ErrorCode.CANCEL)
            self.relay.finished(h.stream)
        self.streams.clear()
        for conn in list(self.upstreams.values()):
            conn.close()
        self.upstreams.clear()
        self.relay.flush()
