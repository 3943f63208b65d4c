"""One HTTP/2 connection of the relay, either side: ``_Endpoint``.

Reading frames, SETTINGS, PING, GOAWAY, RST_STREAM, header blocks, closing streams, connection
errors, and writing out. Everything runs on one event loop, from ``asyncio.Protocol``
callbacks: a frame read on one side is handled and its forwarded frames appended to the other
side's output list in the same callback, and every touched connection is written once at the
end (``RelayServer.flush``). No per-frame tasks, queues or awaits; only interceptors (and
``on_response`` hooks) run as tasks.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from enforcer.relay.h2.flow import _CONN_CREDIT_AT, CONN_WINDOW, STREAM_WINDOW, _FlowControl
from enforcer.relay.h2.frames import (
    CONTINUATION,
    DEFAULT_MAX_FRAME,
    DEFAULT_WINDOW,
    FLAG_ACK,
    FLAG_END_HEADERS,
    FLAG_END_STREAM,
    FLAG_PADDED,
    MAX_FRAME_LIMIT,
    MAX_WINDOW,
    ConnectionError_,
    ErrorCode,
    FrameReader,
    Setting,
    StreamError,
    goaway_frame,
    header_fragment,
    parse_goaway,
    parse_settings,
    parse_u32,
    ping_frame,
    rst_stream_frame,
    settings_frame,
    strip_padding,
    window_update_frame,
)
from enforcer.relay.h2.hpack import Decoder, Encoder, HeaderList, HPACKError
from enforcer.relay.h2.intercept import Observer
from enforcer.relay.h2.streams import _Half, _report

if TYPE_CHECKING:  # for annotations only: each of these imports this module
    from enforcer.relay.h2.server import RelayServer

log = logging.getLogger(__name__)

MAX_HEADER_BLOCK = 1 << 20  # a header block (HEADERS + CONTINUATIONs) larger than this is abuse


class _Endpoint(_FlowControl, asyncio.BufferedProtocol):
    """One HTTP/2 connection: framing, SETTINGS, PING, header blocks; flow control from
    ``_FlowControl``.

    Subclasses say what a stream is on their side (``_on_header_list``) and what losing the
    connection means (``connection_lost``).

    A BufferedProtocol: the transport reads into one preallocated buffer shared by all
    connections (reads are handled one at a time), where a plain Protocol would get a fresh
    256 KiB bytes object per read, which malloc serves with an mmap/munmap pair each time.
    """

    role = "endpoint"

    def __init__(self, relay: RelayServer) -> None:
        self.relay = relay
        self.transport: asyncio.Transport | None = None
        self.reader = FrameReader()
        self.decoder = Decoder()
        self.encoder = Encoder()
        self._out: list[bytes | memoryview] = []
        self._dirty = relay._dirty
        self.streams: dict[int, _Half] = {}
        # Downstream connections report finished calls; upstream ones never do.
        self.observer: Observer | None = None
        self.closed = False
        self._error: str | None = None  # why we closed the connection, for the streams' status
        self.last_peer_sid = 0
        # The peer's settings and our send windows.
        self.peer_max_frame = DEFAULT_MAX_FRAME
        self.peer_initial_window = DEFAULT_WINDOW
        self.peer_max_streams = 1 << 31
        self.send_window = DEFAULT_WINDOW
        self._blocked: dict[_Half, None] = {}  # halves waiting for connection window
        # Our receive window for the connection.
        self.recv_window = CONN_WINDOW
        self.recv_unacked = 0
        # A header block in progress (HEADERS without END_HEADERS).
        self._hdr_sid = 0
        self._hdr_flags = 0
        self._hdr_parts: list[bytes] = []
        self._hdr_size = 0
        self._handlers: list[Callable[[int, int, bytes], None]] = [
            self._on_data,
            self._on_headers,
            self._on_priority,
            self._on_rst_stream,
            self._on_settings,
            self._on_push_promise,
            self._on_ping,
            self._on_goaway,
            self._on_window_update,
            self._on_continuation,
        ]

    # --- output

    def emit(self, data: bytes | memoryview) -> None:
        out = self._out
        if not out:
            self._dirty.append(self)
        out.append(data)

    def _start(self) -> None:
        """Our side of the connection preface: SETTINGS and the connection window."""
        settings: dict[int, int] = {Setting.INITIAL_WINDOW_SIZE: STREAM_WINDOW}
        settings.update(self._extra_settings())
        self.emit(settings_frame(settings))
        self.emit(window_update_frame(0, CONN_WINDOW - DEFAULT_WINDOW))

    def _extra_settings(self) -> dict[int, int]:
        return {}

    # --- input

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.relay._read_view

    def buffer_updated(self, nbytes: int) -> None:
        self.data_received(self.relay._read_view[:nbytes].tobytes())

    def data_received(self, data: bytes) -> None:
        handlers = self._handlers
        try:
            for ftype, flags, sid, payload in self.reader.feed(data):
                if self._hdr_sid and ftype != CONTINUATION:
                    raise ConnectionError_(ErrorCode.PROTOCOL_ERROR, "expected CONTINUATION")
                if ftype < 10:
                    try:
                        handlers[ftype](flags, sid, payload)
                    except StreamError as exc:
                        self._stream_error(exc)
                if self.closed:
                    break
        except ConnectionError_ as exc:
            self.connection_error(exc.code, str(exc))
        except HPACKError as exc:
            self.connection_error(ErrorCode.COMPRESSION_ERROR, f"HPACK: {exc}")
        except Exception as exc:
            log.exception("%s: internal error", self.role)
            self.connection_error(ErrorCode.INTERNAL_ERROR, f"relay internal error: {exc}")
        self.relay.flush()

    def _on_data(self, flags: int, sid: int, payload: bytes) -> None:
        if not sid:
            raise ConnectionError_(ErrorCode.PROTOCOL_ERROR, "DATA on stream 0")
        flow = len(payload)
        window = self.recv_window - flow
        if window < 0:
            raise ConnectionError_(ErrorCode.FLOW_CONTROL_ERROR, "connection window exceeded")
        unacked = self.recv_unacked + flow
        if unacked >= _CONN_CREDIT_AT:
            self.emit(window_update_frame(0, unacked))
            window += unacked
            unacked = 0
        self.recv_window = window
        self.recv_unacked = unacked
        if flags & FLAG_PADDED:
            payload = strip_padding(flags, payload)
        h = self.streams.get(sid)
        if h is None:
            if self._idle(sid):
                raise ConnectionError_(ErrorCode.PROTOCOL_ERROR, f"DATA on idle stream {sid}")
            return  # a stream we already closed: the connection window was credited above
        if h.remote_ended:
            raise StreamError(sid, ErrorCode.STREAM_CLOSED, "DATA after END_STREAM")
        h.recv_window -= flow
        if h.recv_window < 0:
            raise StreamError(sid, ErrorCode.FLOW_CONTROL_ERROR, "stream window exceeded")
        if flow != len(payload):
            h.credit(flow - len(payload))  # padding is consumed here
        h.stream.on_data(h, payload, bool(flags & FLAG_END_STREAM))

    def _on_headers(self, flags: int, sid: int, payload: bytes) -> None:
        if not sid:
            raise ConnectionError_(ErrorCode.PROTOCOL_ERROR, "HEADERS on stream 0")
        fragment = header_fragment(flags, payload) if flags & 0x28 else payload  # PADDED|PRIORITY
        if flags & FLAG_END_HEADERS:
            self._on_header_list(sid, self.decoder.decode(fragment), bool(flags & FLAG_END_STREAM))
            return
        self._hdr_sid = sid
        self._hdr_flags = flags
        self._hdr_parts = [fragment]
        self._hdr_size = len(fragment)

    def _on_continuation(self, flags: int, sid: int, payload: bytes) -> None:
        if not self._hdr_sid or sid != self._hdr_sid:
            raise ConnectionError_(ErrorCode.PROTOCOL_ERROR, "unexpected CONTINUATION")
        self._hdr_parts.append(payload)
        self._hdr_size += len(payload)
        if self._hdr_size > MAX_HEADER_BLOCK:
            raise ConnectionError_(ErrorCode.ENHANCE_YOUR_CALM, "header block too large")
        if flags & FLAG_END_HEADERS:
            block = b"".join(self._hdr_parts)
            end = bool(self._hdr_flags & FLAG_END_STREAM)
            self._hdr_sid = 0
            self._hdr_parts = []
            self._on_header_list(sid, self.decoder.decode(block), end)

    def _on_header_list(self, sid: int, headers: HeaderList, end: bool) -> None:
        raise NotImplementedError

    def _on_priority(self, flags: int, sid: int, payload: bytes) -> None:
        if not sid:
            raise ConnectionError_(ErrorCode.PROTOCOL_ERROR, "PRIORITY on stream 0")
        if len(payload) != 5:
            raise StreamError(sid, ErrorCode.FRAME_SIZE_ERROR, "PRIORITY payload is not 5 bytes")
        # Dropped: priorities are advisory and do not cross the relay.

    def _on_rst_stream(self, flags: int, sid: int, payload: bytes) -> None:
        if not sid:
            raise ConnectionError_(ErrorCode.PROTOCOL_ERROR, "RST_STREAM on stream 0")
        code = parse_u32(payload, "RST_STREAM")
        h = self.streams.get(sid)
        if h is None:
            if self._idle(sid):
                raise ConnectionError_(ErrorCode.PROTOCOL_ERROR, f"RST_STREAM on idle stream {sid}")
            return
        h.local_ended = h.remote_ended = True
        h.stream.on_reset(h, code)

    def _idle(self, sid: int) -> bool:
        """Whether ``sid`` was never opened on this connection (frames on it are an error)."""
        raise NotImplementedError

    def _on_settings(self, flags: int, sid: int, payload: bytes) -> None:
        if sid:
            raise ConnectionError_(ErrorCode.PROTOCOL_ERROR, "SETTINGS on a stream")
        if flags & FLAG_ACK:
            if payload:
                raise ConnectionError_(ErrorCode.FRAME_SIZE_ERROR, "SETTINGS ACK with a payload")
            return
        for key, value in parse_settings(payload):
            if key == Setting.INITIAL_WINDOW_SIZE:
                if value > MAX_WINDOW:
                    raise ConnectionError_(ErrorCode.FLOW_CONTROL_ERROR, "initial window too big")
                delta = value - self.peer_initial_window
                self.peer_initial_window = value
                if delta:
                    self._adjust_windows(delta)
            elif key == Setting.MAX_FRAME_SIZE:
                if not DEFAULT_MAX_FRAME <= value <= MAX_FRAME_LIMIT:
                    raise ConnectionError_(ErrorCode.PROTOCOL_ERROR, f"bad MAX_FRAME_SIZE {value}")
                self.peer_max_frame = value
            elif key == Setting.HEADER_TABLE_SIZE:
                self.encoder.peer_table_size_changed()
            elif key == Setting.ENABLE_PUSH:
                if value > 1:
                    raise ConnectionError_(ErrorCode.PROTOCOL_ERROR, f"bad ENABLE_PUSH {value}")
            elif key == Setting.MAX_CONCURRENT_STREAMS:
                self.peer_max_streams = value
            # Unknown settings (gRPC's own among them) are ignored, as RFC 9113 requires.
        self.emit(settings_frame(ack=True))
        self._settings_changed()

    def _settings_changed(self) -> None:
        pass

    def _on_push_promise(self, flags: int, sid: int, payload: bytes) -> None:
        raise ConnectionError_(ErrorCode.PROTOCOL_ERROR, "PUSH_PROMISE is not allowed here")

    def _on_ping(self, flags: int, sid: int, payload: bytes) -> None:
        if sid:
            raise ConnectionError_(ErrorCode.PROTOCOL_ERROR, "PING on a stream")
        if len(payload) != 8:
            raise ConnectionError_(ErrorCode.FRAME_SIZE_ERROR, "PING payload is not 8 bytes")
        if not flags & FLAG_ACK:
            self.emit(ping_frame(payload, ack=True))

    def _on_goaway(self, flags: int, sid: int, payload: bytes) -> None:
        if sid:
            raise ConnectionError_(ErrorCode.PROTOCOL_ERROR, "GOAWAY on a stream")
        last, code, debug = parse_goaway(payload)
        self._peer_going_away(last, code, debug)

    def _peer_going_away(self, last: int, code: int, debug: bytes) -> None:
        pass

    # --- closing streams

    def reset(self, h: _Half, code: int) -> None:
        """Abort ``h`` with RST_STREAM (when it is open on the wire) and forget it."""
        if h.local_ended and h.remote_ended:
            self.forget(h)
            return
        self.clear_queue(h)
        if h.sid:
            self.emit(rst_stream_frame(h.sid, code))
        h.local_ended = h.remote_ended = True
        self.forget(h)

    def _ended_local(self, h: _Half) -> None:
        """We sent END_STREAM on ``h``."""
        h.local_ended = True
        if h.remote_ended:
            self.forget(h)

    def closed_remote(self, h: _Half) -> None:
        """The peer sent END_STREAM on ``h``."""
        if h.local_ended:
            self.forget(h)

    def forget(self, h: _Half) -> None:
        """``h`` is closed both ways: drop it from this connection."""
        if self.streams.pop(h.sid, None) is not None:
            self._blocked.pop(h, None)
            observer = self.observer
            if observer is not None:
                _report(observer, h.stream)
            self._stream_closed()

    def _stream_closed(self) -> None:
        pass

    # --- errors and closing

    def _stream_error(self, exc: StreamError) -> None:
        log.warning("%s: stream %d error %s: %s", self.role, exc.stream_id, exc.code.name, exc)
        h = self.streams.get(exc.stream_id)
        if h is None:
            self.emit(rst_stream_frame(exc.stream_id, exc.code))
            return
        self.reset(h, exc.code)
        self._half_failed(h, exc)

    def _half_failed(self, h: _Half, exc: StreamError) -> None:
        raise NotImplementedError

    def connection_error(self, code: ErrorCode, message: str) -> None:
        """A protocol error by the peer: GOAWAY with ``code``, then close this connection."""
        if self.closed:
            return
        log.warning("%s: connection error %s: %s", self.role, code.name, message)
        self.emit(goaway_frame(self.last_peer_sid, code, message.encode()[:200]))
        self._error = message
        self.close()

    def close(self) -> None:
        """Write what is pending and close the transport (connection_lost does the rest)."""
        self.relay.flush()
        if self.transport is not None:
            self.transport.close()
        self.closed = True

    def write_out(self) -> None:
        out = self._out
        self._out = []
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.write(b"".join(out) if len(out) > 1 else out[0])
