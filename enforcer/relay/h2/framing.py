"""HTTP/2 framing for the relay, on ``hyperframe``: the RFC's codes, a frame reader, frame builders.

hyperframe parses the frames and serializes the control frames. What is here is the relay's
glue: the RFC 9113 error codes and settings as enums, the two exceptions that carry an error
code (a connection error, a stream error), a reader that cuts a byte stream into frames and
turns hyperframe's complaints into those errors, a writer for the DATA and HEADERS frames of
every call (hyperframe's 9-byte header layout, packed in one step), and builders that return
ready-to-write ``bytes``.

The reader is on every relayed call's path, nine frames a call, so it asks hyperframe once
for what it can keep: its verdict on a DATA, HEADERS or CONTINUATION header (which depends
only on the type, the flags and whether the stream id is 0), and its parse of a small control
frame (by the frame's bytes, the stream id aside). A payload frame without padding or priority
fields is then handed out as its payload, with no ``Frame`` object built for it; a plain DATA
frame also as the bytes it came in, which the other side can send on unchanged.
"""

from __future__ import annotations

import struct
from enum import IntEnum
from typing import Any

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
END_HEADERS = 0x4
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


def _refused(
    ftype: int, flags: int, sid: int, exc: HyperframeError
) -> ConnectionError_ | StreamError:
    """The error a frame stands for that hyperframe would not parse (RFC 9113 section 6)."""
    name = f"frame type {ftype:#x}"
    message = f"{name}: {exc}"
    if isinstance(exc, InvalidPaddingError):
        return ConnectionError_(ErrorCode.PROTOCOL_ERROR, message)
    if isinstance(exc, InvalidDataError):  # a stream id not allowed, or a value out of range
        if ftype == WINDOW_UPDATE and sid:
            return StreamError(sid, ErrorCode.PROTOCOL_ERROR, message)
        if ftype == SETTINGS and flags & _FLAG_ACK and not sid:
            return ConnectionError_(ErrorCode.FRAME_SIZE_ERROR, message)
        return ConnectionError_(ErrorCode.PROTOCOL_ERROR, message)
    if ftype == PRIORITY and sid:
        return StreamError(sid, ErrorCode.FRAME_SIZE_ERROR, message)
    if ftype in (DATA, HEADERS) and flags & _FLAG_PADDED:
        return ConnectionError_(ErrorCode.PROTOCOL_ERROR, message)  # no room for the padding
    return ConnectionError_(ErrorCode.FRAME_SIZE_ERROR, message)  # a body of the wrong length


# What the reader hands out for each frame: (type, stream id, flags, length, body, raw).
# ``flags`` are hyperframe's flag names; ``length`` is the payload length of the frame header
# (what flow control counts); ``body`` is, for DATA, HEADERS and CONTINUATION, the payload
# (bytes, or a memoryview of ``raw``; padding and priority fields removed), for every other
# type hyperframe's parsed ``Frame`` (possibly shared with earlier frames of the same bytes:
# never change it, and take the stream id from the tuple), and for a frame hyperframe refused
# (type REFUSED) the ConnectionError_ or StreamError it stands for. ``raw``: for a DATA frame
# that may be passed on exactly as it came (no padding, no flags but END_STREAM, reserved bit
# clear), the frame's bytes; None otherwise.
Received = tuple[int, int, frozenset[str], int, Any, bytes | None]
REFUSED = 0x100  # no frame type: a type is one byte
_NO_FLAGS: frozenset[str] = frozenset()

_parse_header = Frame.parse_frame_header
# The 9-byte frame header of RFC 9113 4.1: 24-bit length (as H+B), type, flags, reserved bit +
# 31-bit stream id; the layout hyperframe's ``parse_frame_header`` unpacks too (a test checks
# that both read every header alike).
_HEADER = struct.Struct(">HBBBL")
_pack = pack_frame_header = _HEADER.pack  # the 9-byte frame header, packed
# The same header as the reader takes it: type and flags as one 16-bit key (type << 8 | flags).
_READ_HEADER = struct.Struct(">HBHL")
# Frames whose payload is passed on as is: without PADDED or PRIORITY, hyperframe's
# ``parse_body`` for them is a copy of the payload and nothing else.
_PAYLOAD_TYPES = frozenset((DATA, HEADERS, CONTINUATION))
_PAD_OR_PRIORITY = _FLAG_PADDED | 0x20
# hyperframe's verdict on a frame header (parse_frame_header: the frame class and its flag
# names, or an error for a stream id its type does not allow) depends on the type, the flags
# byte and whether the stream id is 0, nothing else. Kept for the payload types without
# PADDED and PRIORITY, by type and flags, for stream ids other than 0 (on stream 0 they are
# refused: hyperframe is asked every time).
_VERDICTS: dict[int, frozenset[str]] = {}
# Small control frames come back byte for byte (gRPC's BDP ping, the same window increment
# after every call, a stream's WINDOW_UPDATE): the reader keeps a few parsed ones, keyed by
# their bytes except the stream id (which hyperframe only checks for being 0 or not), and
# hands the same (never changed) frame out again.
_MEMO_MAX_BODY = 16
_MEMO_ENTRIES = 64
_MISS: tuple[None, None, frozenset[str]] = (None, None, frozenset())


class FrameReader:
    """Cuts a byte stream into frames parsed by hyperframe; keeps the tail of an incomplete frame.

    ``feed`` returns whole frames only, as ``Received`` tuples. A frame hyperframe refuses
    comes out as a REFUSED tuple in its place; after one that stands for a connection error,
    or a frame longer than ``max_frame_size``, or bytes other than the ``preface`` it was
    told to expect first, nothing more is read. Frame types hyperframe
    does not know come out with their type and an ``ExtensionFrame``, which the relay ignores
    as RFC 9113 requires.
    """

    __slots__ = ("_buf", "_memo", "_memo0", "_need", "_preface", "broken", "max_frame_size")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME, *, preface: bytes = b"") -> None:
        # What must come before the first frame (a server's reader: the client preface), and
        # is not there yet.
        self._preface = preface
        self._buf = bytearray()
        self._need = 9
        # By a frame's bytes without its stream id: (the frame parsed with stream id 0, with
        # another one, its flags); hyperframe's verdict depends on the id only being 0 or not.
        self._memo: dict[bytes, tuple[Frame | None, Frame | None, frozenset[str]]] = {}
        # Those on stream 0 (a peer's BDP PING and connection WINDOW_UPDATE, on every call),
        # by their whole bytes: the ``Received`` tuple itself.
        self._memo0: dict[bytes, Received] = {}
        self.max_frame_size = max_frame_size
        self.broken = False

    def feed(self, data: bytes | memoryview) -> list[Received]:
        """The frames completed by ``data`` (which is not kept: a memoryview may be reused)."""
        if self.broken:
            return []
        if self._preface:
            want = self._preface
            head = bytes(data[: len(want)])
            if not want.startswith(head):
                self.broken = True
                error = ConnectionError_(ErrorCode.PROTOCOL_ERROR, "bad HTTP/2 client preface")
                return [(REFUSED, 0, _NO_FLAGS, 0, error, None)]
            self._preface = want[len(head) :]
            data = data[len(head) :]
            if not data:
                return []
        buf = self._buf
        if buf:
            buf += data
            if len(buf) < self._need:
                return []
            view = bytes(buf)
            buf.clear()
        else:
            # What was read as bytes (not copied: the transport hands over a bytes object of
            # its own), since slicing bytes is one step a frame, where slicing a view of a
            # buffer is a view and then a copy.
            view = bytes(data)
        frames: list[Received] = []
        pos = 0
        end = len(view)
        limit = self.max_frame_size
        verdicts = _VERDICTS
        memo = self._memo
        memo0 = self._memo0
        unpack = _READ_HEADER.unpack_from
        last = end - 9  # where the last whole frame header may start
        while pos <= last:
            high, low, kind, field = unpack(view, pos)
            length = (high << 8) + low
            if length > limit:
                self.broken = True
                error = ConnectionError_(
                    ErrorCode.FRAME_SIZE_ERROR, f"frame of {length} bytes exceeds {limit}"
                )
                frames.append((REFUSED, 0, _NO_FLAGS, length, error, None))
                return frames
            stop = pos + 9 + length
            if stop > end:
                self._need = 9 + length
                break
            sid = field & 0x7FFFFFFF
            if sid and (flags := verdicts.get(kind)) is not None:
                if kind <= 1 and field == sid:  # DATA that may pass as it is
                    raw = view[pos:stop]
                    # (a short payload is cheaper copied than viewed)
                    body = view[pos + 9 : stop] if length <= 512 else memoryview(raw)[9:]
                    frames.append((DATA, sid, flags, length, body, raw))
                else:
                    frames.append((kind >> 8, sid, flags, length, view[pos + 9 : stop], None))
                pos = stop
                continue
            ftype = kind >> 8
            if length <= _MEMO_MAX_BODY and ftype not in _PAYLOAD_TYPES:  # seen before?
                if not field:
                    got = memo0.get(view[pos:stop])
                    if got is not None:
                        frames.append(got)
                        pos = stop
                        continue
                seen = memo.get(view[pos : pos + 5] + view[pos + 9 : stop], _MISS)
                if seen[sid != 0] is not None:
                    frames.append((ftype, sid, seen[2], length, seen[sid != 0], None))
                    pos = stop
                    continue
            got = self._parse(view, pos, stop, ftype, kind & 0xFF, sid, length)
            pos = stop
            if got is None:
                continue
            frames.append(got)
            if got[0] == REFUSED and isinstance(got[4], ConnectionError_):
                self.broken = True
                return frames
        else:
            self._need = 9
        if pos < end:
            buf += view[pos:]
        return frames

    def _parse(
        self, view: bytes, pos: int, stop: int, ftype: int, fbits: int, sid: int, length: int
    ) -> Received | None:
        """One frame through hyperframe (header and body); None for an unknown type it refused."""
        try:
            frame, _ = _parse_header(memoryview(view[pos : pos + 9]))
            frame.parse_body(memoryview(view[pos + 9 : stop]))
        except HyperframeError as exc:  # a stream id the type does not allow, a bad body
            if ftype > CONTINUATION:  # an extension frame we cannot read: ignored
                return None
            return (REFUSED, sid, _NO_FLAGS, length, _refused(ftype, fbits, sid, exc), None)
        flags = frozenset(frame.flags)
        if ftype in _PAYLOAD_TYPES:
            if not fbits & _PAD_OR_PRIORITY:  # (payload types are never on stream 0)
                _VERDICTS[(ftype << 8) | fbits] = flags
            return (ftype, sid, flags, length, frame.data, None)  # type: ignore[attr-defined]
        if length <= _MEMO_MAX_BODY:
            memo = self._memo
            key = view[pos : pos + 5] + view[pos + 9 : stop]
            seen = memo.get(key, _MISS)
            if seen is _MISS and len(memo) >= _MEMO_ENTRIES:
                memo.clear()
            # (frame for stream 0, frame for any other stream, flags)
            memo[key] = (frame, seen[1], flags) if not sid else (seen[0], frame, flags)
            if view[pos + 5 : pos + 9] != b"\0\0\0\0":  # (stream 0, reserved bit clear)
                return (ftype, sid, flags, length, frame, None)
            memo0 = self._memo0
            if len(memo0) >= _MEMO_ENTRIES:
                memo0.clear()
            got = memo0[view[pos:stop]] = (ftype, 0, flags, length, frame, None)
            return got
        return (ftype, sid, flags, length, frame, None)


class FrameWriter:
    """Writes the frames a connection sends on every call: DATA, HEADERS with its
    CONTINUATIONs, PING answers. One per connection (one event loop).

    A DATA, HEADERS or CONTINUATION frame without padding or priority is its 9-byte header
    (hyperframe's layout, ``_HEADER``) and the payload as it is: the header is packed here in
    one step, where hyperframe's ``serialize`` builds it through the frame's validating
    ``Flags`` and a body copy (three times the work, on 5 frames a call). The tests check the
    two agree byte for byte; every other frame is serialized by hyperframe.
    """

    __slots__ = ("_pongs",)

    def __init__(self) -> None:
        self._pongs: dict[bytes, bytes] = {}

    @staticmethod
    def data(stream_id: int, data: bytes | memoryview, end: bool) -> bytes:
        n = len(data)
        return _pack(n >> 8, n & 0xFF, DATA, end, stream_id) + data

    @staticmethod
    def headers(stream_id: int, block: bytes, max_frame_size: int, end: bool) -> bytes:
        """HEADERS (+ CONTINUATION frames when the block exceeds the peer's frame size)."""
        n = len(block)
        if n <= max_frame_size:
            return _pack(n >> 8, n & 0xFF, HEADERS, END_HEADERS | end, stream_id) + block
        parts = []
        for pos in range(0, n, max_frame_size):
            chunk = block[pos : pos + max_frame_size]
            size = len(chunk)
            last = END_HEADERS if pos + size >= n else 0
            if pos:
                parts.append(_pack(size >> 8, size & 0xFF, CONTINUATION, last, stream_id))
            else:
                parts.append(_pack(size >> 8, size & 0xFF, HEADERS, last | end, stream_id))
            parts.append(chunk)
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
    "REFUSED",
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
    "PingFrame",
    "Received",
    "RstStreamFrame",
    "Setting",
    "SettingsFrame",
    "StreamError",
    "WindowUpdateFrame",
    "code_name",
]
