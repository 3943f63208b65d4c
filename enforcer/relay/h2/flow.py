"""HTTP/2 flow control: the windows the relay advertises, and sending within the peer's.

As receiver we advertise large windows, and credit them back only once the bytes have been
passed on to the other side (or consumed): so a slow reader on one side holds back the writer on
the other, and what the relay buffers for a peer is bounded by the windows it announced: one
stream window per stream, one connection window per connection (``Half.credit``,
``Endpoint.credit_connection``). Below that, each socket's write buffer has high and low
water marks: a connection whose peer does not read stops the reading of the connections that
feed it until it drains (``Endpoint.pause_writing``).
As sender we keep the peer's connection and stream windows and frame size, and park DATA (and
anything after it on that stream) until a WINDOW_UPDATE makes room (``FlowControl``, the
sending half of every ``Endpoint``).
"""

from __future__ import annotations

import asyncio
from itertools import chain
from typing import Protocol

from enforcer.relay.h2.framing import (
    END_HEADERS,
    HEADERS,
    MAX_WINDOW,
    ConnectionError_,
    ErrorCode,
    FrameWriter,
    StreamError,
    WindowUpdateFrame,
    pack_frame_header,
)
from enforcer.relay.h2.grpc_wire import final_status
from enforcer.relay.h2.half import Half, Relay
from enforcer.relay.h2.header_codec import HeaderEncoder, HeaderList, SharedHeaders
from enforcer.relay.h2.intercept import Observer
from enforcer.relay.h2.windows import Q_DATA, Q_HEADERS, Q_OWN


class Host(Relay, Protocol):
    """The server, as its connections use it (``server.RelayServer``)."""

    dirty: list[FlowControl]  # connections with frames to write out at the next flush

    def late(self, conn: FlowControl) -> None: ...


class SendEvents(Protocol):
    """What sending on a stream makes happen on its connection (``Endpoint`` supplies it)."""

    def ended_local(self, h: Half) -> None:
        """We sent END_STREAM on ``h``."""

    def headers_too_large(self, h: Half, size: int) -> None:
        """A header block for ``h`` is over the peer's SETTINGS_MAX_HEADER_LIST_SIZE."""


class FlowControl:
    """The sending side of a connection (``Endpoint``): the peer's windows, WINDOW_UPDATE, and
    sending headers and DATA on a stream as far as the windows allow, parking the rest."""

    # Set by ``Endpoint.__init__``.
    _out: list[bytes | memoryview]
    _dirty: list[FlowControl]  # connections with frames to write out
    _blocked: dict[Half, None]
    streams: dict[int, Half]
    send_window: int
    peer_max_frame: int
    peer_max_header_list: int
    encoder: HeaderEncoder
    writer: FrameWriter
    observer: Observer | None

    transport: asyncio.Transport | None
    _late: list[bytes]  # PING answers waiting for the next write
    events: SendEvents  # the connection itself: what sending on a stream makes happen there

    def emit(self, data: bytes | memoryview) -> None:
        """Queue ``data`` for the connection's next write (``RelayServer.flush``)."""
        out = self._out
        if not out:
            self._dirty.append(self)
        out.append(data)

    def write_out(self) -> None:
        """Write what is pending, PING answers last, in one write."""
        out = self._out
        self._out = []
        late = self._late
        if late:  # PING answers go after the frames they waited for
            out += late
            self._late = []
        transport = self.transport
        if out and transport is not None and not transport.is_closing():
            transport.write(b"".join(out) if len(out) > 1 else out[0])

    def _adjust_windows(self, delta: int) -> None:
        for h in list(self.streams.values()):
            h.window += delta
            if h.window > MAX_WINDOW:
                raise ConnectionError_(ErrorCode.FLOW_CONTROL_ERROR, "stream window overflow")
            if delta > 0 and h.queue:
                self._drain(h)

    def _on_window_update(
        self,
        sid: int,
        flags: frozenset[str],
        length: int,
        frame: WindowUpdateFrame,
        raw: bytes | None,
    ) -> None:
        increment = frame.window_increment
        if not sid:
            window = self.send_window = self.send_window + increment
            if window > MAX_WINDOW:
                raise ConnectionError_(ErrorCode.FLOW_CONTROL_ERROR, "connection window overflow")
            if not self._blocked:
                return
            for blocked in list(self._blocked):
                if self.send_window <= 0:
                    break
                self._drain(blocked)
            return
        h = self.streams.get(sid)
        if h is None:
            return
        h.window += increment
        if h.window > MAX_WINDOW:
            raise StreamError(sid, ErrorCode.FLOW_CONTROL_ERROR, "stream window overflow")
        if h.queue:
            self._drain(h)

    # --- sending on a stream

    def send_headers(self, h: Half, headers: HeaderList, end: bool) -> None:
        if h.local_ended:
            return
        limit = self.peer_max_header_list
        if limit:
            size = header_list_size(headers)
            if size > limit:
                self.events.headers_too_large(h, size)
                return
        if h.queue or not h.sid:
            h.park((Q_HEADERS, headers, end))
            return
        self._emit_headers(h, headers, end)

    def _emit_headers(self, h: Half, headers: HeaderList, end: bool) -> None:
        block = self.encoder.encode(headers)
        n = len(block)
        if n <= self.peer_max_frame:  # one HEADERS frame (FrameWriter.headers, inlined)
            frame = pack_frame_header(n >> 8, n & 0xFF, HEADERS, END_HEADERS | end, h.sid) + block
        else:
            frame = self.writer.headers(h.sid, block, self.peer_max_frame, end)
        out = self._out
        if not out:
            self._dirty.append(self)
        out.append(frame)
        h.headers_sent = True
        if end:
            if self.observer is not None:
                h.stream.status = final_status(headers)
            self.events.ended_local(h)

    def send_data(
        self, h: Half, data: bytes, end: bool, *, own: bool = False, raw: bytes | None = None
    ) -> None:
        """Send ``data`` on ``h`` as the windows allow; what was received from the other side
        (not ``own``) is credited back to it as it leaves. ``raw``: ``data`` as a whole DATA
        frame on ``h``'s stream id, with ``end`` as its only flag, sent as is when it can go
        out whole right now (no frame is built for it)."""
        if h.local_ended:
            if not own and h.peer is not None:
                h.peer.credit(len(data))  # dropped: the sender may use the room again
            return
        n = len(data)
        if (
            not h.queue
            and h.sid
            and n <= h.window
            and n <= self.send_window
            and n <= self.peer_max_frame
        ):
            out = self._out
            if not out:
                self._dirty.append(self)
            out.append(raw if raw is not None else self.writer.data(h.sid, data, end))
            if n:
                h.window -= n
                self.send_window -= n
                if not own and h.peer is not None:
                    h.peer.credit(n)
            if end:
                self.events.ended_local(h)
            return
        h.park((Q_OWN if own else Q_DATA, memoryview(data), end))
        if h.sid:
            self._drain(h)

    def _drain(self, h: Half) -> None:
        """Send what waits on ``h`` as far as the windows allow."""
        queue = h.queue
        sid = h.sid
        while queue:
            kind, payload, end = queue[0]
            if kind == Q_HEADERS:
                queue.popleft()
                self._emit_headers(h, payload, end)  # type: ignore[arg-type]
                continue
            data: memoryview = payload  # type: ignore[assignment]
            n = len(data)
            if n:
                room = min(h.window, self.send_window, self.peer_max_frame)
                if room <= 0:
                    if self.send_window <= 0 and h.window > 0:
                        self._blocked[h] = None
                    else:
                        self._blocked.pop(h, None)
                    return
                if room < n:
                    chunk = data[:room]
                    queue[0] = (kind, data[room:], end)
                    last = False
                else:
                    chunk = data
                    room = n
                    queue.popleft()
                    last = end
                self.emit(self.writer.data(sid, chunk, last))
                h.window -= room
                self.send_window -= room
                if kind == Q_DATA and h.peer is not None:
                    h.peer.credit(room)
            else:
                queue.popleft()
                last = end
                self.emit(self.writer.data(sid, b"", end))
            if last:
                self.events.ended_local(h)
                break
        self._blocked.pop(h, None)

    def clear_queue(self, h: Half) -> None:
        """Drop what waits on ``h``; what came from the other side is credited back to it."""
        queue = h.queue
        if queue:
            dropped = sum(len(p) for kind, p, _ in queue if kind == Q_DATA)  # type: ignore[arg-type,misc]
            queue.clear()
            if dropped and h.peer is not None:
                h.peer.credit(dropped)
        self._blocked.pop(h, None)


def header_list_size(headers: HeaderList) -> int:
    """A header list's size as SETTINGS_MAX_HEADER_LIST_SIZE counts it (RFC 9113 6.5.2)."""
    if type(headers) is SharedHeaders:
        return headers.size
    return sum(map(len, chain.from_iterable(headers))) + 32 * len(headers)
