"""One HTTP/2 connection of the relay, either side: ``Endpoint``.

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
from typing import Any, Protocol

from enforcer.relay.h2.floods import Flood
from enforcer.relay.h2.flow import FlowControl, Host
from enforcer.relay.h2.framing import (
    CONTINUATION,
    DEFAULT_MAX_FRAME,
    DEFAULT_WINDOW,
    MAX_FRAME_LIMIT,
    MAX_WINDOW,
    REFUSED,
    ConnectionError_,
    ErrorCode,
    Frame,
    FrameReader,
    FrameWriter,
    GoAwayFrame,
    PingFrame,
    RstStreamFrame,
    Setting,
    SettingsFrame,
    StreamError,
    goaway_frame,
    rst_stream_frame,
    settings_frame,
    window_update_frame,
)
from enforcer.relay.h2.half import Half
from enforcer.relay.h2.header_codec import (
    MAX_HEADER_LIST_SIZE,
    HeaderBlockError,
    HeaderDecoder,
    HeaderEncoder,
    HeaderList,
)
from enforcer.relay.h2.intercept import Observer
from enforcer.relay.h2.windows import (
    CONN_CREDIT_AT,
    CONN_WINDOW,
    STREAM_WINDOW,
    WRITE_BUFFER_HIGH,
    WRITE_BUFFER_LOW,
)

log = logging.getLogger(__name__)

Flags = frozenset[str]  # a received frame's flags (hyperframe's names)

# A header block (HEADERS + CONTINUATIONs, compressed) longer than this, or cut into more
# CONTINUATION frames than this, is abuse: GOAWAY ENHANCE_YOUR_CALM. A block that decodes to
# more than MAX_HEADER_LIST_SIZE is stopped by the decoder (COMPRESSION_ERROR).
MAX_HEADER_BLOCK = 2 * MAX_HEADER_LIST_SIZE
MAX_CONTINUATIONS = 32
# How long a PING answer may wait for a write to its peer (``Endpoint._pong``), and how many.
PONG_DELAY = 0.002
MAX_LATE = 16


class Source(Protocol):
    """A connection whose frames are forwarded to another (``Endpoint``)."""

    def hold(self, by: Endpoint) -> None: ...

    def release(self, by: Endpoint) -> None: ...


class Endpoint(FlowControl, asyncio.Protocol):
    """One HTTP/2 connection: framing, SETTINGS, PING, header blocks; flow control from
    ``FlowControl``.

    Subclasses say what a stream is on their side (``_on_header_list``), which connections feed
    this one (``_sources``: they stop being read while this one's socket does not drain), and
    what losing the connection means (``connection_lost``).

    A plain Protocol: uvloop, the relay's loop, reads into its own buffer and hands each
    read over as one ``bytes`` of the size read, which the frame reader slices without another
    copy. (As a BufferedProtocol, each read cost two more calls into Python, ``get_buffer``
    and ``buffer_updated``, a memoryview and a copy: about a tenth of the relay's CPU time
    per call. asyncio's own loop would allocate 256 KiB per read for a plain Protocol.)
    """

    role = "endpoint"

    def __init__(self, relay: Host) -> None:
        self.relay = relay
        self.transport: asyncio.Transport | None = None
        self.reader = FrameReader()
        self.writer = FrameWriter()
        self.decoder = HeaderDecoder(MAX_HEADER_LIST_SIZE)
        self.encoder = HeaderEncoder()
        self._out: list[bytes | memoryview] = []
        self._late: list[bytes] = []  # PING answers waiting for the next write (``_pong``)
        self._dirty = relay.dirty
        self.events = self
        self.streams: dict[int, Half] = {}
        # Downstream connections report finished calls; upstream ones never do.
        self.observer: Observer | None = None
        self.closed = False
        self._error: str | None = None  # why we closed the connection, for the streams' status
        self.last_peer_sid = 0
        # The peer's settings and our send windows.
        self.peer_max_frame = DEFAULT_MAX_FRAME
        self.peer_initial_window = DEFAULT_WINDOW
        self.peer_max_streams = 1 << 31
        self.peer_max_header_list = 0  # 0: the peer announced no limit
        self.send_window = DEFAULT_WINDOW
        self._blocked: dict[Half, None] = {}  # halves waiting for connection window
        # Our receive window for the connection.
        self.recv_window = CONN_WINDOW
        self.recv_unacked = 0
        # A header block in progress (HEADERS without END_HEADERS).
        self._hdr_sid = 0
        self._hdr_end = False
        self._hdr_parts: list[bytes] = []
        self._hdr_size = 0
        self._hdr_frames = 0
        # Floods, and who stopped reading us (connections whose sockets do not drain).
        self._pings = Flood("PING")
        self._settings = Flood("SETTINGS")
        self._resets = Flood("RST_STREAM")
        self._paused_by: set[Endpoint] = set()
        self.writing_paused = False
        # By frame type (an index: a type is one byte), each called with a ``Received``
        # tuple's fields: the RFC's ten types, then types unknown to the RFC (ignored, as RFC
        # 9113 requires), then at REFUSED what hyperframe refused.
        handlers: list[Callable[[int, Flags, int, Any, bytes | None], None]] = [
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
        handlers += [self._on_extension] * (REFUSED - len(handlers))
        handlers.append(self._on_refused)
        self._handlers = handlers

    # --- output

    def _start(self, transport: asyncio.Transport) -> None:
        """Our side of the connection preface: SETTINGS and the connection window."""
        self.transport = transport
        transport.set_write_buffer_limits(WRITE_BUFFER_HIGH, WRITE_BUFFER_LOW)
        settings: dict[int, int] = {
            Setting.INITIAL_WINDOW_SIZE: STREAM_WINDOW,
            Setting.MAX_HEADER_LIST_SIZE: MAX_HEADER_LIST_SIZE,
        }
        settings.update(self._extra_settings())
        self.emit(settings_frame(settings))
        self.emit(window_update_frame(0, CONN_WINDOW - DEFAULT_WINDOW))

    def _extra_settings(self) -> dict[int, int]:
        return {}

    # --- backpressure: a connection whose socket does not drain stops its sources' reading

    def _sources(self) -> list[Source]:
        """The connections whose frames are forwarded to this one."""
        raise NotImplementedError

    def pause_writing(self) -> None:
        """The transport's buffer passed its high-water mark: stop reading what feeds it."""
        self.writing_paused = True
        for source in self._sources():
            source.hold(self)

    def resume_writing(self) -> None:
        self.writing_paused = False
        for source in self._sources():
            source.release(self)

    def hold(self, by: Endpoint) -> None:
        """Stop reading this connection while ``by`` does not drain."""
        if not self._paused_by and self.transport is not None and not self.closed:
            self.transport.pause_reading()
        self._paused_by.add(by)

    def release(self, by: Endpoint) -> None:
        paused = self._paused_by
        if by in paused:
            paused.discard(by)
            if not paused and self.transport is not None and not self.closed:
                self.transport.resume_reading()

    def _release_all(self) -> None:
        """This connection is gone: whatever it held back is read again."""
        for source in self._sources():
            source.release(self)

    # --- input

    def data_received(self, data: bytes | memoryview) -> None:
        handlers = self._handlers
        try:
            for ftype, sid, flags, length, body, raw in self.reader.feed(data):
                if self._hdr_sid and ftype != CONTINUATION:
                    raise ConnectionError_(ErrorCode.PROTOCOL_ERROR, "expected CONTINUATION")
                try:
                    handlers[ftype](sid, flags, length, body, raw)
                except StreamError as exc:
                    self._stream_error(exc)
                if self.closed:
                    break
        except ConnectionError_ as exc:
            self.connection_error(exc.code, str(exc))
        except HeaderBlockError as exc:
            code = ErrorCode.COMPRESSION_ERROR
            self.connection_error(code, f"HPACK: {exc}")
        except Exception as exc:
            log.exception("%s: internal error", self.role)
            self.connection_error(ErrorCode.INTERNAL_ERROR, f"relay internal error: {exc}")
        self.relay.flush()

    def _on_data(
        self, sid: int, flags: Flags, flow: int, payload: bytes, raw: bytes | None
    ) -> None:
        # ``flow``: the whole payload counts, padding included. ``raw``: the frame as it came,
        # when it may be passed on unchanged (framing.Received).
        window = self.recv_window - flow
        if window < 0:
            raise ConnectionError_(ErrorCode.FLOW_CONTROL_ERROR, "connection window exceeded")
        self.recv_window = window
        self._pings.count = self._settings.count = 0
        h = self.streams.get(sid)
        if h is None:
            self.credit_connection(flow)
            if self._idle(sid):
                raise ConnectionError_(ErrorCode.PROTOCOL_ERROR, f"DATA on idle stream {sid}")
            return  # a stream we already closed
        if h.remote_ended:
            self.credit_connection(flow)
            raise StreamError(sid, ErrorCode.STREAM_CLOSED, "DATA after END_STREAM")
        h.recv_window -= flow
        if h.recv_window < 0:
            self.credit_connection(flow)
            raise StreamError(sid, ErrorCode.FLOW_CONTROL_ERROR, "stream window exceeded")
        if flow != len(payload):
            h.credit(flow - len(payload))  # padding is consumed here
        h.stream.on_data(h, payload, "END_STREAM" in flags, raw)

    def credit_connection(self, n: int) -> None:
        """``n`` received bytes were passed on or dropped: re-open our connection window.

        Deferred until then, so the bytes the relay holds for this connection's peer (waiting
        for the other side's windows) never exceed the window we announced, CONN_WINDOW.
        """
        unacked = self.recv_unacked + n
        if unacked >= CONN_CREDIT_AT:
            self.emit(window_update_frame(0, unacked))
            self.recv_window += unacked
            unacked = 0
        self.recv_unacked = unacked

    def _on_headers(
        self, sid: int, flags: Flags, length: int, block: bytes, raw: bytes | None
    ) -> None:
        self._pings.count = self._settings.count = 0
        if "END_HEADERS" in flags:
            headers = self.decoder.decode(block)
            self._on_header_list(sid, headers, "END_STREAM" in flags)
            return
        self._hdr_sid = sid
        self._hdr_end = "END_STREAM" in flags
        self._hdr_parts = [block]
        self._hdr_size = len(block)
        self._hdr_frames = 0

    def _on_continuation(
        self, sid: int, flags: Flags, length: int, fragment: bytes, raw: bytes | None
    ) -> None:
        if not self._hdr_sid or sid != self._hdr_sid:
            raise ConnectionError_(ErrorCode.PROTOCOL_ERROR, "unexpected CONTINUATION")
        self._hdr_parts.append(fragment)
        self._hdr_size += len(fragment)
        self._hdr_frames += 1
        if self._hdr_size > MAX_HEADER_BLOCK:
            raise ConnectionError_(
                ErrorCode.ENHANCE_YOUR_CALM, f"header block over {MAX_HEADER_BLOCK} bytes"
            )
        if self._hdr_frames > MAX_CONTINUATIONS:
            raise ConnectionError_(
                ErrorCode.ENHANCE_YOUR_CALM,
                f"CONTINUATION flood: header block in over {MAX_CONTINUATIONS} frames",
            )
        if "END_HEADERS" in flags:
            block = b"".join(self._hdr_parts)
            self._hdr_sid = 0
            self._hdr_parts = []
            self._on_header_list(sid, self.decoder.decode(block), self._hdr_end)

    def _on_header_list(self, sid: int, headers: HeaderList, end: bool) -> None:
        raise NotImplementedError

    def _on_priority(
        self, sid: int, flags: Flags, length: int, frame: Frame, raw: bytes | None
    ) -> None:
        pass  # priorities are advisory and do not cross the relay

    def _on_rst_stream(
        self, sid: int, flags: Flags, length: int, frame: RstStreamFrame, raw: bytes | None
    ) -> None:
        h = self.streams.get(sid)
        if h is None:
            if self._idle(sid):
                raise ConnectionError_(ErrorCode.PROTOCOL_ERROR, f"RST_STREAM on idle stream {sid}")
            return
        self._resets.hit()
        h.local_ended = h.remote_ended = True
        h.stream.on_reset(h, frame.error_code)

    def _idle(self, sid: int) -> bool:
        """Whether ``sid`` was never opened on this connection (frames on it are an error)."""
        raise NotImplementedError

    def _on_settings(
        self, sid: int, flags: Flags, length: int, frame: SettingsFrame, raw: bytes | None
    ) -> None:
        if "ACK" in flags:
            return
        self._settings.hit()
        for key, value in frame.settings.items():
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
                self.encoder.peer_table_size(value)
            elif key == Setting.ENABLE_PUSH:
                if value > 1:
                    raise ConnectionError_(ErrorCode.PROTOCOL_ERROR, f"bad ENABLE_PUSH {value}")
            elif key == Setting.MAX_CONCURRENT_STREAMS:
                self.peer_max_streams = value
            elif key == Setting.MAX_HEADER_LIST_SIZE:
                self.peer_max_header_list = value
            # Unknown settings (gRPC's own among them) are ignored, as RFC 9113 requires.
        self.emit(settings_frame(ack=True))
        self._settings_changed()

    def _settings_changed(self) -> None:
        pass

    def _on_push_promise(
        self, sid: int, flags: Flags, length: int, frame: Frame, raw: bytes | None
    ) -> None:
        raise ConnectionError_(ErrorCode.PROTOCOL_ERROR, "PUSH_PROMISE is not allowed here")

    def _on_extension(
        self, sid: int, flags: Flags, length: int, frame: Frame, raw: bytes | None
    ) -> None:
        pass  # a frame type RFC 9113 does not define: ignored

    def _on_refused(
        self,
        sid: int,
        flags: Flags,
        length: int,
        error: ConnectionError_ | StreamError,
        raw: bytes | None,
    ) -> None:
        raise error  # a frame hyperframe refused: the error it stands for

    def _on_ping(
        self, sid: int, flags: Flags, length: int, frame: PingFrame, raw: bytes | None
    ) -> None:
        if "ACK" not in flags:
            self._pings.hit()
            self._pong(self.writer.pong(frame.opaque_data))

    def _pong(self, answer: bytes) -> None:
        """Answer a PING with the next write to this peer, or within PONG_DELAY.

        A gRPC peer sends a BDP PING with the first DATA it receives after its last PING was
        answered (grpc-go: one on every call, from kubelet and from the runtime). Answered at
        once, each costs a write of its own and, at the peer, a read of its own and a new
        PING on the next call. Sent after the frames of the relay's next write to that peer,
        the answer costs no write, and the peer, which reads it after that DATA, sends its
        next PING only with the call after: half as many. A peer's PING timeout (gRPC
        keepalive: 20 s) is far above PONG_DELAY. Fewer than MAX_LATE answers wait past the end
        of a read: the MAX_LATE-th is written out with that read's frames.
        """
        late = self._late
        late.append(answer)
        if len(late) == 1:
            self.relay.late(self)
        elif len(late) == MAX_LATE and not self._out:
            self._dirty.append(self)  # written out at the end of this read

    def _on_goaway(
        self, sid: int, flags: Flags, length: int, frame: GoAwayFrame, raw: bytes | None
    ) -> None:
        self._peer_going_away(
            frame.last_stream_id & 0x7FFFFFFF, frame.error_code, frame.additional_data
        )

    def _peer_going_away(self, last: int, code: int, debug: bytes) -> None:
        pass

    # --- closing streams

    def reset(self, h: Half, code: int) -> None:
        """Abort ``h`` with RST_STREAM (when it is open on the wire) and forget it."""
        if h.local_ended and h.remote_ended:
            self.forget(h)
            return
        self.clear_queue(h)
        if h.sid:
            self.emit(rst_stream_frame(h.sid, code))
        h.local_ended = h.remote_ended = True
        self.forget(h)

    def ended_local(self, h: Half) -> None:
        """We sent END_STREAM on ``h``."""
        h.local_ended = True
        self._resets.count = 0  # a call finished: resets before it were no flood
        if h.remote_ended:
            self.forget(h)

    def closed_remote(self, h: Half) -> None:
        """The peer sent END_STREAM on ``h``."""
        if h.local_ended:
            self.forget(h)

    def forget(self, h: Half) -> None:
        """``h`` is closed both ways: drop it from this connection."""
        if self.streams.pop(h.sid, None) is not None:
            self._blocked.pop(h, None)
            if self.observer is not None:
                self.relay.finished(h.stream)
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

    def _half_failed(self, h: Half, exc: StreamError) -> None:
        raise NotImplementedError

    def headers_too_large(self, h: Half, size: int) -> None:
        """A header block to send on ``h`` is over the peer's SETTINGS_MAX_HEADER_LIST_SIZE."""
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
