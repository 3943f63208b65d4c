"""HTTP/2 framing for the relay, on ``hyperframe``: the RFC's codes, a frame reader, frame builders.

hyperframe parses and serializes every frame (its ``Frame`` classes are what the endpoints
handle). What is here is the relay's glue: the RFC 9113 error codes and settings as enums, the
two exceptions that carry an error code (a connection error, a stream error), a reader that
cuts a byte stream into hyperframe frames and turns hyperframe's complaints into those errors,
and builders that return ready-to-write ``bytes``.
"""

from __future__ import annotations

from enum import IntEnum
from typing import TypeVar

from hyperframe.exceptions import HyperframeError, InvalidDataError, InvalidPaddingError
from hyperframe.frame import (
    FRAME_MAX_ALLOWED_LEN,
    FRAME_MAX_LEN,
    ContinuationFrame,
    DataFrame,
    ExtensionFrame,
    Frame,
    GoAwayFrame,
    HeadersFrame,
    PingFrame,
    RstStreamFrame,
    SettingsFrame,
    WindowUpdateFrame,
)

_F = TypeVar("_F", bound=Frame)

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

DEFAULT_WINDOW = 65535
DEFAULT_MAX_FRAME = FRAME_MAX_LEN
MAX_FRAME_LIMIT = FRAME_MAX_ALLOWED_LEN
MAX_WINDOW = (1 << 31) - 1

# Frame types (hyperframe's ``Frame.type``).
DATA = DataFrame.type
HEADERS = HeadersFrame.type
PRIORITY = 0x2
RST_STREAM = RstStreamFrame.type
SETTINGS = SettingsFrame.type
PUSH_PROMISE = 0x5
PING = PingFrame.type
GOAWAY = GoAwayFrame.type
WINDOW_UPDATE = WindowUpdateFrame.type
CONTINUATION = ContinuationFrame.type

_FLAG_ACK = 0x1
_FLAG_PADDED = 0x8


class ErrorCode(IntEnum):
    NO_ERROR = 0x0
    PROTOCOL_ERROR = 0x1
    INTERNAL_ERROR = 0x2
    FLOW_CONTROL_ERROR = 0x3
    SETTINGS_TIMEOUT = 0x4
    STREAM_CLOSED = 0x5
    FRAME_SIZE_ERROR = 0x6
    REFUSED_STREAM = 0x7
    CANCEL = 0x8
    COMPRESSION_ERROR = 0x9
    CONNECT_ERROR = 0xA
    ENHANCE_YOUR_CALM = 0xB
    INADEQUATE_SECURITY = 0xC
    HTTP_1_1_REQUIRED = 0xD


class Setting(IntEnum):
    HEADER_TABLE_SIZE = SettingsFrame.HEADER_TABLE_SIZE
    ENABLE_PUSH = SettingsFrame.ENABLE_PUSH
    MAX_CONCURRENT_STREAMS = SettingsFrame.MAX_CONCURRENT_STREAMS
    INITIAL_WINDOW_SIZE = SettingsFrame.INITIAL_WINDOW_SIZE
    MAX_FRAME_SIZE = SettingsFrame.MAX_FRAME_SIZE
    MAX_HEADER_LIST_SIZE = SettingsFrame.MAX_HEADER_LIST_SIZE


class ConnectionError_(Exception):
    """A connection error (RFC 9113 5.4.1): GOAWAY with ``code``, then close."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class StreamError(Exception):
    """A stream error (RFC 9113 5.4.2): RST_STREAM ``stream_id`` with ``code``."""

    def __init__(self, stream_id: int, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.stream_id = stream_id
        self.code = code


def code_name(code: int) -> str:
    """An error code's name, for logs and messages (unknown codes in hex)."""
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code:#x}"


class InvalidFrame(Frame):
    """A frame hyperframe refused, standing in its place in the reader's output: handling it
    raises the stream or connection error it stands for."""

    type = -1

    def __init__(self, stream_id: int, error: ConnectionError_ | StreamError) -> None:
        self.stream_id = stream_id
        self.error = error


def _refused(ftype: int, flags: int, sid: int, exc: HyperframeError) -> InvalidFrame:
    """The error a frame stands for that hyperframe would not parse (RFC 9113 section 6)."""
    name = f"frame type {ftype:#x}"
    message = f"{name}: {exc}"
    error: ConnectionError_ | StreamError
    if isinstance(exc, InvalidPaddingError):
        error = ConnectionError_(ErrorCode.PROTOCOL_ERROR, message)
    elif isinstance(exc, InvalidDataError):  # a stream id not allowed, or a value out of range
        if ftype == WINDOW_UPDATE and sid:
            error = StreamError(sid, ErrorCode.PROTOCOL_ERROR, message)
        elif ftype == SETTINGS and flags & _FLAG_ACK and not sid:
            error = ConnectionError_(ErrorCode.FRAME_SIZE_ERROR, message)
        else:
            error = ConnectionError_(ErrorCode.PROTOCOL_ERROR, message)
    elif ftype == PRIORITY and sid:
        error = StreamError(sid, ErrorCode.FRAME_SIZE_ERROR, message)
    elif ftype in (DATA, HEADERS) and flags & _FLAG_PADDED:
        error = ConnectionError_(ErrorCode.PROTOCOL_ERROR, message)  # no room for the padding
    else:  # a body of the wrong length
        error = ConnectionError_(ErrorCode.FRAME_SIZE_ERROR, message)
    return InvalidFrame(sid, error)


_parse_header = Frame.parse_frame_header
# Connection-level PING and WINDOW_UPDATE frames come back byte for byte (gRPC's BDP ping,
# the same window increment after every call): the reader keeps a few parsed ones, by their
# bytes, and hands the same (never changed) frame object out again.
_MEMO_TYPES = frozenset((PING, WINDOW_UPDATE))
_MEMO_ENTRIES = 64


class FrameReader:
    """Cuts a byte stream into hyperframe frames; keeps the tail of an incomplete frame.

    ``feed`` returns whole frames only. A frame hyperframe refuses comes out as an
    ``InvalidFrame`` in its place; after one that stands for a connection error, or a frame
    longer than ``max_frame_size``, nothing more is read. Frame types hyperframe does not
    know come out as ``ExtensionFrame``s, which the relay ignores as RFC 9113 requires.
    """

    __slots__ = ("_buf", "_memo", "_need", "broken", "max_frame_size")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME) -> None:
        self._buf = bytearray()
        self._need = 9
        self._memo: dict[bytes, Frame] = {}
        self.max_frame_size = max_frame_size
        self.broken = False

    def feed(self, data: bytes | memoryview) -> list[Frame]:
        """The frames completed by ``data`` (which is not kept: a memoryview may be reused)."""
        if self.broken:
            return []
        buf = self._buf
        if buf:
            buf += data
            if len(buf) < self._need:
                return []
            view = memoryview(bytes(buf))
            buf.clear()
        else:
            view = memoryview(data)
        frames: list[Frame] = []
        pos = 0
        end = len(view)
        limit = self.max_frame_size
        memo = self._memo
        while end - pos >= 9:
            key = None
            if view[pos + 3] in _MEMO_TYPES and not any(view[pos + 5 : pos + 9]):
                stop = pos + 9 + view[pos + 2]
                if view[pos] == view[pos + 1] == 0 and stop <= end:
                    key = view[pos:stop].tobytes()
                    seen = memo.get(key)
                    if seen is not None:
                        frames.append(seen)
                        pos = stop
                        continue
            head = view[pos : pos + 9]
            refused: HyperframeError | None = None
            try:
                frame, length = _parse_header(head)
            except HyperframeError as exc:  # a stream id the frame type does not allow
                frame, refused = None, exc
                length = int.from_bytes(head[:3], "big")
            if length > limit:
                self.broken = True
                error = ConnectionError_(
                    ErrorCode.FRAME_SIZE_ERROR, f"frame of {length} bytes exceeds {limit}"
                )
                frames.append(InvalidFrame(0, error))
                return frames
            stop = pos + 9 + length
            if stop > end:
                self._need = 9 + length
                break
            if frame is not None:
                try:
                    frame.parse_body(view[pos + 9 : stop])
                except HyperframeError as exc:
                    refused = exc
            pos = stop
            if refused is None:
                frames.append(frame)  # type: ignore[arg-type]
                if key is not None:
                    if len(memo) >= _MEMO_ENTRIES:
                        memo.clear()
                    memo[key] = frame  # type: ignore[assignment]
                continue
            ftype, flags = head[3], head[4]
            if ftype > CONTINUATION:  # an extension frame we cannot read: ignored
                continue
            bad = _refused(ftype, flags, int.from_bytes(head[5:9], "big") & 0x7FFFFFFF, refused)
            frames.append(bad)
            if isinstance(bad.error, ConnectionError_):
                self.broken = True
                return frames
        else:
            self._need = 9
        if pos < end:
            buf += view[pos:]
        return frames


_END_STREAM = ("END_STREAM",)


def _fixed(frame: _F) -> _F:
    """``frame`` with its flags frozen: hyperframe only asks its flags ``in`` and iterates
    them, and a frame whose flags never change can answer that from a frozenset (in C) rather
    than from hyperframe's validating ``Flags`` set (two Python calls per question, six per
    HEADERS frame written)."""
    frame.flags = frozenset(frame.flags)  # type: ignore[assignment]
    return frame


class FrameWriter:
    """Serializes the frames a connection sends on every call (DATA, HEADERS with its
    CONTINUATIONs, PING answers) with hyperframe, reusing one frame object per kind and flags
    rather than building one per frame. One per connection (one event loop)."""

    __slots__ = ("_cont", "_cont_end", "_data", "_data_end", "_headers", "_pongs")

    def __init__(self) -> None:
        self._data = _fixed(DataFrame(1))
        self._data_end = _fixed(DataFrame(1, flags=_END_STREAM))
        self._headers = {
            (False, False): _fixed(HeadersFrame(1)),
            (False, True): _fixed(HeadersFrame(1, flags=("END_STREAM",))),
            (True, False): _fixed(HeadersFrame(1, flags=("END_HEADERS",))),
            (True, True): _fixed(HeadersFrame(1, flags=("END_HEADERS", "END_STREAM"))),
        }
        self._cont = _fixed(ContinuationFrame(1))
        self._cont_end = _fixed(ContinuationFrame(1, flags=("END_HEADERS",)))
        self._pongs: dict[bytes, bytes] = {}

    def data(self, stream_id: int, data: bytes | memoryview, end: bool) -> bytes:
        frame = self._data_end if end else self._data
        frame.stream_id = stream_id
        frame.data = data  # type: ignore[assignment]
        out = frame.serialize()
        frame.data = b""
        return out

    def headers(self, stream_id: int, block: bytes, max_frame_size: int, end: bool) -> bytes:
        """HEADERS (+ CONTINUATION frames when the block exceeds the peer's frame size)."""
        if len(block) <= max_frame_size:
            frame = self._headers[True, end]
            frame.stream_id = stream_id
            frame.data = block
            return frame.serialize()
        chunks = [block[i : i + max_frame_size] for i in range(0, len(block), max_frame_size)]
        frame = self._headers[False, end]
        frame.stream_id = stream_id
        frame.data = chunks[0]
        parts = [frame.serialize()]
        for i, chunk in enumerate(chunks[1:], 2):
            cont = self._cont_end if i == len(chunks) else self._cont
            cont.stream_id = stream_id
            cont.data = chunk
            parts.append(cont.serialize())
        return b"".join(parts)

    def pong(self, opaque: bytes) -> bytes:
        """The PING ACK for ``opaque`` (gRPC pings repeat theirs: a few answers are kept)."""
        out = self._pongs.get(opaque)
        if out is None:
            out = ping_frame(opaque, ack=True)
            if len(self._pongs) >= _MEMO_ENTRIES:
                self._pongs.clear()
            self._pongs[opaque] = out
        return out


# --- builders: each returns the frame's bytes, serialized by hyperframe


def settings_frame(settings: dict[int, int] | None = None, *, ack: bool = False) -> bytes:
    if ack:
        return SettingsFrame(0, flags=("ACK",)).serialize()
    return SettingsFrame(0, dict(settings or {})).serialize()


def ping_frame(opaque: bytes, *, ack: bool = False) -> bytes:
    return PingFrame(0, opaque, flags=("ACK",) if ack else ()).serialize()


def window_update_frame(stream_id: int, increment: int) -> bytes:
    return WindowUpdateFrame(stream_id, increment).serialize()


def rst_stream_frame(stream_id: int, code: int) -> bytes:
    return RstStreamFrame(stream_id, int(code)).serialize()


def goaway_frame(last_stream_id: int, code: int, debug: bytes = b"") -> bytes:
    return GoAwayFrame(0, last_stream_id, int(code), debug).serialize()


__all__ = [
    "CONTINUATION",
    "DATA",
    "DEFAULT_MAX_FRAME",
    "DEFAULT_WINDOW",
    "GOAWAY",
    "HEADERS",
    "MAX_FRAME_LIMIT",
    "MAX_WINDOW",
    "PING",
    "PREFACE",
    "PRIORITY",
    "PUSH_PROMISE",
    "RST_STREAM",
    "SETTINGS",
    "WINDOW_UPDATE",
    "ConnectionError_",
    "ContinuationFrame",
    "DataFrame",
    "ErrorCode",
    "ExtensionFrame",
    "Frame",
    "FrameReader",
    "FrameWriter",
    "GoAwayFrame",
    "HeadersFrame",
    "InvalidFrame",
    "PingFrame",
    "RstStreamFrame",
    "Setting",
    "SettingsFrame",
    "StreamError",
    "WindowUpdateFrame",
    "code_name",
]
