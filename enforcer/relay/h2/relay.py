"""A frame-level HTTP/2 intermediary that relays gRPC from kubelet to containerd.

kubelet connects to our unix socket as if it were the runtime. Each accepted (downstream)
connection is a full HTTP/2 server endpoint; for it we open, lazily, one HTTP/2 client
(upstream) connection per upstream socket that its calls are routed to. Header blocks are
decoded with the receiving side's HPACK decoder and re-encoded for the other side with a
stateless non-indexing encoder, so the two sides' HPACK contexts are independent. Upstream
stream ids are ours, allocated when a stream is actually opened upstream.

Everything runs on one event loop, from ``asyncio.Protocol`` callbacks: a frame read on one
side is handled and its forwarded frames appended to the other side's output list in the same
callback, and every touched connection is written once at the end (``RelayServer.flush``). No
per-frame tasks, queues or awaits; only interceptors (and ``on_response`` hooks) run as tasks.

Flow control, per side: as receiver we advertise large windows; the connection window is
credited back as soon as DATA arrives (so one stalled stream cannot block the connection), a
stream's window only once its bytes have been passed on to the other side (so a slow reader
on one side holds back the writer on the other, with at most one stream window buffered). As
sender we keep the peer's connection and stream windows and frame size, and park DATA (and
anything after it on that stream) until a WINDOW_UPDATE makes room.

Interception: calls whose ``:path`` is in ``intercepts`` are collected (unary request), handed
to the interceptor as a ``Call`` in their own task, and then refused by the relay itself or
forwarded, possibly rewritten; ``Forward.on_response`` sees the upstream's answer before it is
released downstream.

Limits, by design: intercepted methods must be unary-request (one uncompressed message; other
shapes are answered UNIMPLEMENTED), and their request, like a buffered ``on_response``
response, is held in memory whole; peers' SETTINGS_MAX_HEADER_LIST_SIZE is not enforced in
either direction; streams refused by an upstream GOAWAY are answered UNAVAILABLE rather than
retried; no TLS (unix sockets only).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import stat
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import unquote_to_bytes

import grpc

from enforcer.relay.h2.frames import (
    CONTINUATION,
    DATA,
    DEFAULT_MAX_FRAME,
    DEFAULT_WINDOW,
    FLAG_ACK,
    FLAG_END_HEADERS,
    FLAG_END_STREAM,
    FLAG_PADDED,
    MAX_FRAME_LIMIT,
    MAX_WINDOW,
    PREFACE,
    ConnectionError_,
    ErrorCode,
    FrameReader,
    Setting,
    StreamError,
    frame_header,
    goaway_frame,
    header_fragment,
    headers_frames,
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

log = logging.getLogger(__name__)

# Receive windows we advertise. Large, so that neither kubelet nor containerd ever waits on us
# for a normal call; a stream's window is also what the relay may buffer for that stream.
STREAM_WINDOW = 4 << 20
CONN_WINDOW = 64 << 20
_STREAM_CREDIT_AT = STREAM_WINDOW // 2  # batch WINDOW_UPDATEs: one per half window
_CONN_CREDIT_AT = CONN_WINDOW // 4
MAX_HEADER_BLOCK = 1 << 20  # a header block (HEADERS + CONTINUATIONs) larger than this is abuse
MAX_INTERCEPTED_MESSAGE = 64 << 20  # unary messages the relay collects for an interceptor
CONNECT_TIMEOUT = 5.0
READ_BUFFER = 256 << 10

_UNAVAILABLE = grpc.StatusCode.UNAVAILABLE.value[0]
_INTERNAL = grpc.StatusCode.INTERNAL.value[0]
_UNIMPLEMENTED = grpc.StatusCode.UNIMPLEMENTED.value[0]
_CANCELLED = grpc.StatusCode.CANCELLED.value[0]
_DEADLINE_EXCEEDED = grpc.StatusCode.DEADLINE_EXCEEDED.value[0]
_RESOURCE_EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
_UNKNOWN = grpc.StatusCode.UNKNOWN.value[0]


# --------------------------------------------------------------------------- public interface


@dataclass(frozen=True, slots=True)
class Call:
    """An intercepted unary call: its method path, request metadata and request message."""

    method: str
    metadata: list[tuple[str, str]]  # non-pseudo request headers, in order (latin-1 text)
    message: bytes  # the request message, without the gRPC 5-byte prefix


@dataclass(frozen=True, slots=True)
class Response:
    """The upstream's answer to a forwarded call, as seen by ``Forward.on_response``."""

    status: int  # gRPC status code (0 = OK)
    details: str  # grpc-message, percent-decoded
    message: bytes | None  # the response message (None when absent, failed or compressed)


@dataclass(frozen=True, slots=True)
class Forward:
    """Send the call upstream with ``message`` (rewritten or not) as its request message.

    With ``on_response``, the response is held back until the upstream has finished and
    ``await on_response(Response)`` has returned; if the hook raises, the client gets INTERNAL
    with the hook's error instead of the upstream's answer. With ``hold=False`` the response
    is not held: the hook sees a copy once the upstream has finished.
    """

    message: bytes
    on_response: Callable[[Response], Awaitable[None]] | None = None
    # False: the response goes to the client as it arrives and ``on_response`` only observes
    # a copy afterwards (for calls whose answer the enforcer reads but never gates).
    hold: bool = True


@dataclass(frozen=True, slots=True)
class Refuse:
    """Answer the call in the relay with ``code``/``message``; the upstream never sees it."""

    code: grpc.StatusCode
    message: str = ""


Interceptor = Callable[[Call], Awaitable[Forward | Refuse]]
# A tap watches a call it never holds up: made when the call starts (so it can note the
# moment), called on the event loop once the upstream has answered, with the request message
# and the response. It must be quick and must not raise.
Tap = Callable[[bytes, Response], None]
TapFactory = Callable[[], Tap]
Route = Callable[[str], str]
# Told once per finished call: (method path, gRPC status the client got, seconds since its
# request headers arrived). Runs on the event loop, so it must be quick and must not block.
Observer = Callable[[str, int, float], None]


# --------------------------------------------------------------------------- gRPC helpers

_PERCENT_SAFE = frozenset(range(0x20, 0x7F)) - {ord("%")}


def percent_encode(message: str) -> bytes:
    """grpc-message encoding: UTF-8, then %XX for bytes outside printable ASCII and '%'."""
    raw = message.encode("utf-8", "replace")
    if all(b in _PERCENT_SAFE for b in raw):
        return raw
    return b"".join(bytes((b,)) if b in _PERCENT_SAFE else b"%%%02X" % b for b in raw)


def percent_decode(raw: bytes) -> str:
    return unquote_to_bytes(raw).decode("utf-8", "replace")


_HTTP_TO_GRPC = {400: 13, 401: 16, 403: 7, 404: 12, 429: 14, 502: 14, 503: 14, 504: 14}
_TIMEOUT_UNITS = {b"H": 3600.0, b"M": 60.0, b"S": 1.0, b"m": 1e-3, b"u": 1e-6, b"n": 1e-9}


def parse_grpc_timeout(value: bytes) -> float | None:
    """Seconds in a grpc-timeout header value ("100m", "5S"), None when malformed."""
    unit = _TIMEOUT_UNITS.get(value[-1:])
    digits = value[:-1]
    if unit is None or not digits.isdigit() or len(digits) > 8:
        return None
    return int(digits) * unit


def format_grpc_timeout(seconds: float) -> bytes:
    """The shortest-unit grpc-timeout value (at most 8 digits) not exceeding ``seconds``."""
    for unit, scale in ((b"n", 1e9), (b"u", 1e6), (b"m", 1e3), (b"S", 1.0), (b"M", 1 / 60)):
        value = int(seconds * scale)
        if value < 100_000_000:
            return b"%d%s" % (max(value, 1), unit)
    return b"%dH" % min(int(seconds / 3600), 99_999_999)


def _status_headers(code: int, message: str, with_status: bool) -> HeaderList:
    headers: HeaderList = []
    if with_status:  # trailers-only response: the HTTP head goes in the same block
        headers += [(b":status", b"200"), (b"content-type", b"application/grpc")]
    headers.append((b"grpc-status", b"%d" % code))
    if message:
        headers.append((b"grpc-message", percent_encode(message)))
    return headers


def _final_status(headers: HeaderList) -> int:
    """The gRPC status a block that ends a response stands for, as a gRPC client reads it."""
    http = b""
    for name, value in headers:
        if name == b"grpc-status":
            return int(value) if value.isdigit() else _UNKNOWN
        if name == b":status":
            http = value
    if http and http != b"200" and http.isdigit():
        return _HTTP_TO_GRPC.get(int(http), _UNKNOWN)
    return _UNKNOWN


def _report(observer: Observer, stream: _Stream) -> None:
    status = stream.status
    # No status sent: the stream was reset (by either side) or its connection was lost.
    code = status if status >= 0 else _CANCELLED
    try:
        observer(stream.method, code, time.monotonic() - stream.started)
    except Exception:
        log.exception("call observer failed for %s", stream.method)


def _response_of(blocks: list[HeaderList], body: bytes) -> Response:
    """The Response a buffered upstream answer (header blocks and DATA) stands for."""
    fields: dict[bytes, bytes] = {}
    for block in blocks:
        for name, value in block:
            fields[name] = value
    message: bytes | None = None
    if len(body) >= 5 and body[0] == 0:
        message = body[5 : 5 + int.from_bytes(body[1:5], "big")]
    raw_status = fields.get(b"grpc-status")
    if raw_status is not None and raw_status.isdigit():
        return Response(int(raw_status), percent_decode(fields.get(b"grpc-message", b"")), message)
    http = fields.get(b":status", b"")
    if http != b"200" and http.isdigit():
        code = _HTTP_TO_GRPC.get(int(http), _UNKNOWN)
        return Response(code, f"upstream answered HTTP status {http.decode()}", None)
    return Response(_UNKNOWN, "upstream response carried no grpc-status", message)


# --------------------------------------------------------------------------- streams

# _TEE: passing the upstream's response through while keeping a copy for an observer.
# _TAP: passing both ways untouched while keeping copies of request and response for a tap.
_PASS, _COLLECT, _INTERCEPTING, _BUFFER, _DONE, _TEE, _TAP = range(7)
_Q_DATA, _Q_HEADERS = 0, 1


class _Half:
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

    def __init__(self, conn: _Endpoint, stream: _Stream, sid: int) -> None:
        self.conn = conn
        self.stream = stream
        self.sid = sid  # 0 until an upstream stream is opened
        self.peer: _Half | None = None  # the same stream on the other connection
        self.window = conn.peer_initial_window  # send window
        self.queue: deque[tuple[int, object, bool]] = deque()  # what waits for window/opening
        self.local_ended = False  # we sent END_STREAM or RST_STREAM
        self.remote_ended = False  # the peer sent END_STREAM or RST_STREAM
        self.headers_sent = False
        self.recv_window = STREAM_WINDOW
        self.unacked = 0  # received bytes passed on but not yet credited back

    def credit(self, n: int) -> None:
        """``n`` received bytes were passed on (or consumed): re-open our receive window."""
        if self.remote_ended:
            return
        unacked = self.unacked + n
        if unacked >= _STREAM_CREDIT_AT:
            self.conn.emit(window_update_frame(self.sid, unacked))
            self.recv_window += unacked
            unacked = 0
        self.unacked = unacked


@dataclass(slots=True)
class _Interception:
    interceptor: Interceptor | None  # None for a tap
    request_headers: HeaderList
    started: float
    parts: list[bytes] = field(default_factory=list)
    size: int = 0
    on_response: Callable[[Response], Awaitable[None]] | None = None
    response_blocks: list[HeaderList] = field(default_factory=list)
    response_data: list[bytes] = field(default_factory=list)
    delivering: bool = False


class _Stream:
    """One call: its downstream half, its upstream half (once routed) and its relay state."""

    __slots__ = ("down", "icpt", "method", "mode", "relay", "started", "status", "tap", "up")

    def __init__(self, relay: RelayServer, method: str) -> None:
        self.relay = relay
        self.method = method
        self.mode = _PASS
        self.started = 0.0  # set when the relay has an observer
        self.status = -1  # the gRPC status sent downstream, once it is
        self.down: _Half = None  # type: ignore[assignment]  # set right after construction
        self.up: _Half | None = None
        self.icpt: _Interception | None = None
        self.tap: Tap | None = None

    # --- frames from either side

    def on_headers(self, h: _Half, headers: HeaderList, end: bool) -> None:
        if end:
            h.remote_ended = True
        if h is self.down:  # request trailers (gRPC clients send none, HTTP/2 allows them)
            if self.mode in (_PASS, _TAP) and self.up is not None:
                self.up.conn.send_headers(self.up, headers, end)
            elif self.mode == _COLLECT and end:
                self._collected()
            h.conn.closed_remote(h)
            return
        if self.mode == _BUFFER:
            assert self.icpt is not None
            self.icpt.response_blocks.append(headers)
            if end:
                self._response_complete()
        else:
            down = self.down
            down.conn.send_headers(down, headers, end)
            if self.mode == _TEE or self.mode == _TAP:
                self._tee_headers(headers, end)
        if end:
            self._upstream_finished()

    def on_data(self, h: _Half, data: bytes, end: bool) -> None:
        if end:
            h.remote_ended = True
        mode = self.mode
        if mode in (_PASS, _TAP) or (mode == _TEE and h is not self.down):
            peer = h.peer
            if peer is None or peer.local_ended:
                h.credit(len(data))  # nowhere to go: consume
            else:
                peer.conn.send_data(peer, data, end)
            if mode != _PASS:
                icpt = self.icpt
                assert icpt is not None
                if h is self.down:
                    icpt.parts.append(data)
                else:
                    icpt.response_data.append(data)
        elif h is self.down:
            h.credit(len(data))
            if mode == _COLLECT:
                icpt = self.icpt
                assert icpt is not None
                icpt.size += len(data)
                if icpt.size > MAX_INTERCEPTED_MESSAGE:
                    self.mode = _DONE
                    self.answer(_RESOURCE_EXHAUSTED, f"request to {self.method} is too large")
                    return
                icpt.parts.append(data)
                if end:
                    self._collected()
        else:  # _BUFFER: the upstream's response to an on_response call
            h.credit(len(data))
            assert self.icpt is not None
            self.icpt.response_data.append(data)
            if end:
                self._response_complete()
        if end:
            if h is self.down:
                h.conn.closed_remote(h)
            else:
                self._upstream_finished()

    def on_reset(self, h: _Half, code: int) -> None:
        """The peer of ``h`` reset the stream."""
        h.conn.forget(h)
        if h is self.down:
            self.client_gone(code)
        elif self.mode == _BUFFER:
            status = _UNAVAILABLE if code == ErrorCode.REFUSED_STREAM else _INTERNAL
            self.fail(status, f"upstream reset the stream ({_code_name(code)})")
        else:
            down = self.down
            down.conn.reset(down, code)

    # --- lifecycle

    def _upstream_finished(self) -> None:
        """The upstream sent END_STREAM: the call is over there."""
        up = self.up
        assert up is not None
        if up.local_ended:
            up.conn.forget(up)
        else:
            # The response is complete but the request is not: tell the server to stop
            # waiting (as gRPC servers do to clients), and drop the rest of the request.
            up.conn.reset(up, ErrorCode.NO_ERROR)

    def client_gone(self, code: int) -> None:
        """The client reset the stream or its connection died."""
        self.mode, old_mode = _DONE, self.mode
        up = self.up
        if up is not None:
            up.conn.reset(up, code if code != ErrorCode.NO_ERROR else ErrorCode.CANCEL)
        icpt = self.icpt
        if old_mode == _BUFFER and icpt is not None and not icpt.delivering:
            self._deliver(Response(_CANCELLED, "the client cancelled the call", None), None)

    def fail(self, code: int, message: str) -> None:
        """End the call with ``code``: the upstream stream (if any) is reset, the client gets
        the status (after ``on_response`` has seen it, for a call that has one)."""
        up = self.up
        if up is not None:
            up.conn.reset(up, ErrorCode.CANCEL)
        icpt = self.icpt
        if self.mode == _BUFFER and icpt is not None:
            if not icpt.delivering:
                self._deliver(Response(code, message, None), (code, message))
            return
        self.mode = _DONE
        self.answer(code, message)

    def answer(self, code: int, message: str) -> None:
        """Finish the call downstream with a gRPC status of the relay's own."""
        down = self.down
        if down.local_ended:
            return
        down.conn.clear_queue(down)
        down.conn.send_headers(down, _status_headers(code, message, not down.headers_sent), True)

    # --- interception

    def _collected(self) -> None:
        """The whole request of an intercepted call is here: run the interceptor."""
        icpt = self.icpt
        assert icpt is not None
        body = b"".join(icpt.parts)
        icpt.parts = []
        self.mode = _INTERCEPTING
        if len(body) < 5:
            self.mode = _DONE
            self.answer(_INTERNAL, f"relay: {self.method} request carries no message")
            return
        length = int.from_bytes(body[1:5], "big")
        if body[0] != 0:
            self.mode = _DONE
            self.answer(
                _UNIMPLEMENTED, f"relay: compressed requests to {self.method} are not supported"
            )
            return
        if len(body) != 5 + length:
            self.mode = _DONE
            self.answer(
                _UNIMPLEMENTED,
                f"relay: {self.method} is intercepted and must carry exactly one message",
            )
            return
        metadata = [
            (name.decode("latin-1"), value.decode("latin-1"))
            for name, value in icpt.request_headers
            if not name.startswith(b":")
        ]
        call = Call(self.method, metadata, body[5:])
        self.relay.spawn(self._intercept(call))

    async def _intercept(self, call: Call) -> None:
        icpt = self.icpt
        assert icpt is not None
        try:
            decision = await icpt.interceptor(call)
            if not isinstance(decision, (Forward, Refuse)):
                raise TypeError(f"interceptor returned {type(decision).__name__}")
        except Exception as exc:
            log.exception("interceptor for %s failed", self.method)
            decision = Refuse(grpc.StatusCode.INTERNAL, str(exc) or type(exc).__name__)
        if self.mode != _INTERCEPTING:  # the client went away meanwhile
            # A Forward never sent still has its hook told, so what the interceptor prepared
            # (CPUs set aside for a container) is not left waiting for an answer forever.
            if isinstance(decision, Forward) and decision.on_response is not None:
                self._never_sent(decision, _CANCELLED, "the client went away before the call")
            return
        try:
            if isinstance(decision, Refuse):
                self.mode = _DONE
                code = decision.code
                self.answer(
                    code.value[0] if isinstance(code, grpc.StatusCode) else int(code),
                    decision.message,
                )
            else:
                self._forward(decision)
        finally:
            self.relay.flush()

    def _forward(self, decision: Forward) -> None:
        icpt = self.icpt
        assert icpt is not None
        headers = []
        for name, value in icpt.request_headers:
            if name == b"content-length":  # the message may have changed size
                continue
            if name == b"grpc-timeout":
                # Time spent in the interceptor is gone from the client's deadline.
                budget = parse_grpc_timeout(value)
                if budget is not None:
                    left = budget - (time.monotonic() - icpt.started)
                    if left <= 0:
                        self.mode = _DONE
                        self.answer(_DEADLINE_EXCEEDED, "deadline exceeded in the relay")
                        if decision.on_response is not None:
                            self._never_sent(
                                decision, _DEADLINE_EXCEEDED, "deadline exceeded in the relay"
                            )
                        return
                    value = format_grpc_timeout(left)
            headers.append((name, value))
        if decision.on_response is not None:
            icpt.on_response = decision.on_response
            self.mode = _BUFFER if decision.hold else _TEE
        else:
            self.mode = _PASS
        message = decision.message
        down = self.down
        if not down.conn.open_upstream(self, headers, False):
            return
        up = self.up
        assert up is not None
        up.conn.send_data(up, len(message).to_bytes(5, "big") + message, True)

    def _never_sent(self, decision: Forward, code: int, message: str) -> None:
        assert decision.on_response is not None
        self.relay.spawn(self._observe(decision.on_response, Response(code, message, None)))

    def _tee_headers(self, headers: HeaderList, end: bool) -> None:
        icpt = self.icpt
        assert icpt is not None
        icpt.response_blocks.append(headers)
        if not end:
            return
        response = _response_of(icpt.response_blocks, b"".join(icpt.response_data))
        icpt.response_blocks, icpt.response_data = [], []
        if self.tap is not None:
            body = b"".join(icpt.parts)
            icpt.parts = []
            try:
                # A unary request's one message, without its 5-byte gRPC prefix.
                self.tap(body[5:] if len(body) >= 5 and body[0] == 0 else b"", response)
            except Exception:
                log.exception("tap for %s failed", self.method)
        elif icpt.on_response is not None:
            self.relay.spawn(self._observe(icpt.on_response, response))

    async def _observe(
        self, hook: Callable[[Response], Awaitable[None]], response: Response
    ) -> None:
        try:
            await hook(response)
        except Exception:
            log.exception("on_response observer for %s failed", self.method)

    def _response_complete(self) -> None:
        icpt = self.icpt
        assert icpt is not None
        response = _response_of(icpt.response_blocks, b"".join(icpt.response_data))
        self._deliver(response, None)

    def _deliver(self, response: Response, failure: tuple[int, str] | None) -> None:
        """Run on_response, then release the buffered response (or ``failure``) downstream."""
        icpt = self.icpt
        assert icpt is not None and icpt.on_response is not None
        icpt.delivering = True
        self.relay.spawn(self._run_on_response(icpt.on_response, response, failure))

    async def _run_on_response(
        self,
        hook: Callable[[Response], Awaitable[None]],
        response: Response,
        failure: tuple[int, str] | None,
    ) -> None:
        try:
            await hook(response)
        except Exception as exc:
            log.exception("on_response hook for %s failed", self.method)
            failure = (_INTERNAL, f"relay: on_response for {self.method} failed: {exc}")
        if self.mode == _DONE:  # the client went away: nobody to answer
            return
        self.mode = _DONE
        icpt = self.icpt
        assert icpt is not None
        try:
            if failure is not None:
                self.answer(*failure)
                return
            down = self.down
            conn = down.conn
            blocks = icpt.response_blocks
            data = icpt.response_data
            if not blocks:
                self.answer(_INTERNAL, "relay: upstream response had no headers")
                return
            tail = blocks[1:]  # trailers (none for a trailers-only response)
            conn.send_headers(down, blocks[0], not data and not tail)
            for i, chunk in enumerate(data):
                conn.send_data(down, chunk, not tail and i == len(data) - 1)
            for i, block in enumerate(tail):
                conn.send_headers(down, block, i == len(tail) - 1)
        finally:
            self.relay.flush()


def _code_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code:#x}"


# --------------------------------------------------------------------------- connections


class _Endpoint(asyncio.BufferedProtocol):
    """One HTTP/2 connection: framing, SETTINGS, PING, flow control, header blocks.

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
        settings = {Setting.INITIAL_WINDOW_SIZE: STREAM_WINDOW}
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

    def _adjust_windows(self, delta: int) -> None:
        for h in list(self.streams.values()):
            h.window += delta
            if h.window > MAX_WINDOW:
                raise ConnectionError_(ErrorCode.FLOW_CONTROL_ERROR, "stream window overflow")
            if delta > 0 and h.queue:
                self._drain(h)

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

    def _on_window_update(self, flags: int, sid: int, payload: bytes) -> None:
        increment = parse_u32(payload, "WINDOW_UPDATE") & 0x7FFFFFFF
        if not sid:
            if not increment:
                raise ConnectionError_(ErrorCode.PROTOCOL_ERROR, "WINDOW_UPDATE of 0")
            self.send_window += increment
            if self.send_window > MAX_WINDOW:
                raise ConnectionError_(ErrorCode.FLOW_CONTROL_ERROR, "connection window overflow")
            for h in list(self._blocked):
                if self.send_window <= 0:
                    break
                self._drain(h)
            return
        h = self.streams.get(sid)
        if not increment:
            raise StreamError(sid, ErrorCode.PROTOCOL_ERROR, "WINDOW_UPDATE of 0")
        if h is None:
            return
        h.window += increment
        if h.window > MAX_WINDOW:
            raise StreamError(sid, ErrorCode.FLOW_CONTROL_ERROR, "stream window overflow")
        if h.queue:
            self._drain(h)

    # --- sending on a stream

    def send_headers(self, h: _Half, headers: HeaderList, end: bool) -> None:
        if h.local_ended:
            return
        if h.queue or not h.sid:
            h.queue.append((_Q_HEADERS, headers, end))
            return
        self._emit_headers(h, headers, end)

    def _emit_headers(self, h: _Half, headers: HeaderList, end: bool) -> None:
        block = self.encoder.encode(headers)
        self.emit(headers_frames(h.sid, block, self.peer_max_frame, end))
        h.headers_sent = True
        if end:
            if self.observer is not None:
                h.stream.status = _final_status(headers)
            self._ended_local(h)

    def send_data(self, h: _Half, data: bytes, end: bool) -> None:
        if h.local_ended:
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
            out.append(frame_header(DATA, FLAG_END_STREAM if end else 0, h.sid, n))
            if n:
                out.append(data)
                h.window -= n
                self.send_window -= n
                if h.peer is not None:
                    h.peer.credit(n)
            if end:
                self._ended_local(h)
            return
        h.queue.append((_Q_DATA, memoryview(data), end))
        if h.sid:
            self._drain(h)

    def _drain(self, h: _Half) -> None:
        """Send what waits on ``h`` as far as the windows allow."""
        queue = h.queue
        sid = h.sid
        while queue:
            kind, payload, end = queue[0]
            if kind == _Q_HEADERS:
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
                self.emit(frame_header(DATA, FLAG_END_STREAM if last else 0, sid, room))
                self.emit(chunk)
                h.window -= room
                self.send_window -= room
                if h.peer is not None:
                    h.peer.credit(room)
            else:
                queue.popleft()
                last = end
                self.emit(frame_header(DATA, FLAG_END_STREAM if end else 0, sid, 0))
            if last:
                self._ended_local(h)
                break
        self._blocked.pop(h, None)

    def clear_queue(self, h: _Half) -> None:
        h.queue.clear()
        self._blocked.pop(h, None)

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


class _Downstream(_Endpoint):
    """A connection accepted from kubelet: we are the HTTP/2 server."""

    role = "downstream"

    def __init__(self, relay: RelayServer) -> None:
        super().__init__(relay)
        self.observer = relay.observer
        self.upstreams: dict[str, _Upstream] = {}
        self._preface = b""
        self.draining = False
        self._goaway_sid = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.relay._conns.add(self)
        self._start()
        self.relay.flush()
        self.data_received = self._preface_received  # type: ignore[method-assign]

    def _preface_received(self, data: bytes) -> None:
        """Until the client preface is complete; then frames go to the regular path."""
        self._preface += data
        if len(self._preface) < len(PREFACE):
            if not PREFACE.startswith(self._preface):
                self._bad_preface()
            return
        if not self._preface.startswith(PREFACE):
            self._bad_preface()
            return
        rest = self._preface[len(PREFACE) :]
        del self.data_received  # back to the class's frame handler
        self._preface = b""
        if rest:
            self.data_received(rest)

    def _bad_preface(self) -> None:
        self.connection_error(ErrorCode.PROTOCOL_ERROR, "bad HTTP/2 client preface")
        self.data_received = lambda data: None  # type: ignore[method-assign]

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
        if self.draining:
            self.emit(rst_stream_frame(sid, ErrorCode.REFUSED_STREAM))
            return
        path = None
        for name, value in headers:
            if name == b":path":
                path = value
                break
        if path is None:
            raise StreamError(sid, ErrorCode.PROTOCOL_ERROR, "request without :path")
        method = path.decode("latin-1")
        stream = _Stream(self.relay, method)
        if self.observer is not None:
            stream.started = time.monotonic()
        down = _Half(self, stream, sid)
        stream.down = down
        self.streams[sid] = down
        if end:
            down.remote_ended = True
        interceptor = self.relay.intercepts.get(method)
        if interceptor is None:
            make_tap = self.relay.taps.get(method)
            if make_tap is not None:
                stream.mode = _TAP
                stream.icpt = _Interception(None, headers, 0.0)
                stream.tap = make_tap()
            self.open_upstream(stream, headers, end)
            return
        stream.mode = _COLLECT
        stream.icpt = _Interception(interceptor, headers, time.monotonic())
        if end:
            stream._collected()

    def open_upstream(self, stream: _Stream, headers: HeaderList, end: bool) -> bool:
        """Route ``stream`` and open it upstream (now, or once the connection is up)."""
        try:
            target = self.relay.route(stream.method)
        except Exception as exc:
            log.exception("route(%r) failed", stream.method)
            stream.fail(_INTERNAL, f"relay: no upstream for {stream.method}: {exc}")
            return False
        self.upstream(target).open(stream, headers, end)
        return True

    def upstream(self, target: str) -> _Upstream:
        """The current upstream connection to ``target``, started if there is none."""
        conn = self.upstreams.get(target)
        if conn is None or conn.closed or conn.going_away:
            conn = _Upstream(self.relay, self, target)
            self.upstreams[target] = conn
            conn.connect()
        return conn

    def _idle(self, sid: int) -> bool:
        return sid > self.last_peer_sid

    def _ended_local(self, h: _Half) -> None:
        h.local_ended = True
        if h.stream.status < 0 and self.observer is not None:
            h.stream.status = _INTERNAL  # DATA ended the response, no trailers: gRPC's reading
        if not h.remote_ended:
            # Our response is complete while the client is still sending: ask it to stop
            # (RFC 9113 8.1), as gRPC servers do. Anything it still sends is ignored.
            self.emit(rst_stream_frame(h.sid, ErrorCode.NO_ERROR))
            h.remote_ended = True
        self.forget(h)

    def _half_failed(self, h: _Half, exc: StreamError) -> None:
        h.stream.client_gone(ErrorCode.CANCEL)

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
            h.stream.fail(_UNAVAILABLE, message)
        self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.relay._conns.discard(self)
        observer = self.observer
        for h in list(self.streams.values()):
            h.local_ended = h.remote_ended = True
            h.stream.client_gone(ErrorCode.CANCEL)
            if observer is not None:
                _report(observer, h.stream)
        self.streams.clear()
        for conn in list(self.upstreams.values()):
            conn.close()
        self.upstreams.clear()
        self.relay.flush()


class _Upstream(_Endpoint):
    """Our client connection to one upstream socket, on behalf of one downstream connection."""

    role = "upstream"

    def __init__(self, relay: RelayServer, owner: _Downstream, target: str) -> None:
        super().__init__(relay)
        self.owner = owner
        self.target = target
        self.ready = False
        self.going_away = False
        self.next_sid = 1
        self.waiting: deque[_Half] = deque()  # halves not yet opened (connecting, or at limit)
        self._connect_task: asyncio.Task[None] | None = None

    def _extra_settings(self) -> dict[int, int]:
        return {Setting.ENABLE_PUSH: 0}

    def connect(self) -> None:
        self._connect_task = self.relay.spawn(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(
                loop.create_unix_connection(lambda: self, self.target), CONNECT_TIMEOUT
            )
        except (TimeoutError, OSError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else repr(exc)
            log.warning("upstream %s is unavailable: %s", self.target, reason)
            self._fail_all(f"upstream {self.target} is unavailable: {reason}")
            self.closed = True
            self.relay.flush()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        if self.closed:  # abandoned while connecting
            transport.close()
            return
        self.emit(PREFACE)
        self._start()
        self.ready = True
        self._open_waiting()
        self.relay.flush()

    def open(self, stream: _Stream, headers: HeaderList, end: bool) -> None:
        up = _Half(self, stream, 0)
        up.peer = stream.down
        stream.down.peer = up
        stream.up = up
        if (
            self.ready
            and not self.waiting
            and len(self.streams) < self.peer_max_streams
            and self.next_sid <= MAX_WINDOW
        ):  # the common case: open it right now
            up.sid = self.next_sid
            self.next_sid += 2
            self.streams[up.sid] = up
            self._emit_headers(up, headers, end)
            return
        up.queue.append((_Q_HEADERS, headers, end))
        self.waiting.append(up)
        if self.ready:
            self._open_waiting()

    def adopt(self, h: _Half) -> None:
        """Take over a not-yet-opened half from a connection that went away."""
        h.conn = self
        h.window = self.peer_initial_window
        self.waiting.append(h)
        if self.ready:
            self._open_waiting()

    def _open_waiting(self) -> None:
        waiting = self.waiting
        while waiting and len(self.streams) < self.peer_max_streams:
            h = waiting.popleft()
            if h.local_ended:  # reset before it was opened
                continue
            if self.next_sid > MAX_WINDOW:  # stream ids exhausted: continue on a new connection
                self.going_away = True
                waiting.appendleft(h)
                self._move_waiting()
                return
            h.sid = self.next_sid
            self.next_sid += 2
            h.window = self.peer_initial_window
            self.streams[h.sid] = h
            self._drain(h)

    def _move_waiting(self) -> None:
        waiting, self.waiting = self.waiting, deque()
        if waiting and not self.owner.closed:
            fresh = self.owner.upstream(self.target)
            for h in waiting:
                if not h.local_ended:
                    fresh.adopt(h)

    def _idle(self, sid: int) -> bool:
        return not sid & 1 or sid >= self.next_sid

    def _on_header_list(self, sid: int, headers: HeaderList, end: bool) -> None:
        h = self.streams.get(sid)
        if h is None:
            if self._idle(sid):
                raise ConnectionError_(ErrorCode.PROTOCOL_ERROR, f"HEADERS on idle stream {sid}")
            return
        if h.remote_ended:
            raise StreamError(sid, ErrorCode.STREAM_CLOSED, "HEADERS after END_STREAM")
        h.stream.on_headers(h, headers, end)

    def _settings_changed(self) -> None:
        if self.waiting:
            self._open_waiting()

    def _half_failed(self, h: _Half, exc: StreamError) -> None:
        h.stream.fail(_INTERNAL, f"relay: upstream {self.target} stream error: {exc}")

    def _stream_closed(self) -> None:
        if self.waiting:
            self._open_waiting()
        elif self.going_away and not self.streams:
            self.close()

    def _peer_going_away(self, last: int, code: int, debug: bytes) -> None:
        self.going_away = True
        if self.owner.upstreams.get(self.target) is self:
            del self.owner.upstreams[self.target]
        if code != ErrorCode.NO_ERROR:
            log.warning("upstream %s sent GOAWAY %s: %r", self.target, _code_name(code), debug)
        for sid, h in list(self.streams.items()):
            if sid > last:  # never processed by the upstream
                h.stream.fail(
                    _UNAVAILABLE, f"upstream {self.target} went away before handling the call"
                )
        self._move_waiting()
        if not self.streams:
            self.close()

    def _fail_all(self, message: str) -> None:
        halves = list(self.streams.values()) + list(self.waiting)
        self.streams.clear()
        self.waiting.clear()
        for h in halves:
            h.local_ended = h.remote_ended = True
            h.stream.fail(_UNAVAILABLE, message)

    def close(self) -> None:
        if self.transport is None:
            self.closed = True
            if self._connect_task is not None:
                self._connect_task.cancel()
            return
        if not self.closed:
            self.emit(goaway_frame(0, ErrorCode.NO_ERROR))
        super().close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.ready = False
        if self.owner.upstreams.get(self.target) is self:
            del self.owner.upstreams[self.target]
        reason = self._error or (str(exc) if exc else "connection closed")
        if self.streams or self.waiting:
            log.warning("connection to upstream %s lost with calls in flight: %s",
                        self.target, reason)  # fmt: skip
        self._fail_all(f"connection to upstream {self.target} lost: {reason}")
        self.relay.flush()


# --------------------------------------------------------------------------- server


class RelayServer:
    """The relay's listening socket and its connections."""

    def __init__(
        self,
        relay_socket: str,
        route: Route,
        intercepts: Mapping[str, Interceptor] | None = None,
        observer: Observer | None = None,
        taps: Mapping[str, TapFactory] | None = None,
    ) -> None:
        self.socket_path = relay_socket
        self.route = route
        self.intercepts: dict[str, Interceptor] = dict(intercepts or {})
        self.taps: dict[str, TapFactory] = dict(taps or {})
        self.observer = observer
        self._server: asyncio.AbstractServer | None = None
        self._conns: set[_Downstream] = set()
        self._dirty: list[_Endpoint] = []
        self._read_view = memoryview(bytearray(READ_BUFFER))
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = asyncio.Event()
        self._socket_inode = -1

    async def start(self) -> None:
        path = self.socket_path
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        _remove_stale_socket(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(path)
            os.chmod(path, 0o660)  # before listen(): nobody can connect in between
            self._socket_inode = os.stat(path).st_ino
            self._server = await asyncio.get_running_loop().create_unix_server(
                lambda: _Downstream(self), sock=sock, backlog=128
            )
        except BaseException:
            sock.close()
            raise
        log.info("CRI relay listening on %s", path)

    def flush(self) -> None:
        """Write out every connection that has pending frames (one write each)."""
        dirty = self._dirty
        while dirty:
            dirty.pop().write_out()

    def spawn(self, coro: Awaitable[None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    @property
    def connections(self) -> int:
        return len(self._conns)

    @property
    def listening(self) -> bool:
        return self._server is not None

    @property
    def socket_inode(self) -> int:
        """The inode of the socket this server bound (-1 before it did)."""
        return self._socket_inode

    async def close(self, grace: float = 5.0) -> None:
        """Stop accepting, GOAWAY every connection, let calls finish for ``grace`` s, close."""
        if self._server is not None:
            self._server.close()
            self._server = None
            with contextlib.suppress(FileNotFoundError):
                # Only our own socket file: a successor may already listen on the same path.
                if os.stat(self.socket_path).st_ino == self._socket_inode:
                    os.unlink(self.socket_path)
        for conn in list(self._conns):
            conn.drain()
        self.flush()
        deadline = time.monotonic() + grace
        while self._conns and any(c.streams for c in self._conns):
            if time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.01)
        for conn in list(self._conns):
            conn.abort("relay shutting down")
        self.flush()
        if self._tasks:
            # Interceptors and on_response hooks (which now see the failure) get a moment to
            # finish their bookkeeping; whatever is still running after that is cancelled.
            left = max(deadline - time.monotonic(), 0.5)
            await asyncio.wait(list(self._tasks), timeout=left)
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=1.0)
        await asyncio.sleep(0)  # let connection_lost callbacks run
        self._closed.set()

    async def wait_closed(self) -> None:
        await self._closed.wait()

    async def __aenter__(self) -> RelayServer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


def _remove_stale_socket(path: str) -> None:
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    # A symbolic link is the fallback an enforcer leaves while none runs (enforcer.handover).
    if not (stat.S_ISSOCK(mode) or stat.S_ISLNK(mode)):
        raise FileExistsError(f"{path} exists and is not a socket")
    os.unlink(path)


async def serve_relay(
    relay_socket: str,
    route: Route,
    intercepts: Mapping[str, Interceptor],
    *,
    ready: asyncio.Event | None = None,
    observer: Observer | None = None,
    taps: Mapping[str, TapFactory] | None = None,
) -> RelayServer:
    """Start a relay on ``relay_socket``; returns the running server (``await .close()``).

    ``observer``, when given, is told about every call once it has finished (see Observer);
    ``taps`` watch the calls of their methods without holding them up (see Tap).
    """
    server = RelayServer(relay_socket, route, intercepts, observer, taps)
    await server.start()
    if ready is not None:
        ready.set()
    return server
