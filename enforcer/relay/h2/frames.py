"""HTTP/2 frames (RFC 9113): constants, a streaming frame reader and frame builders.

Payloads are ``bytes`` (or memoryviews when sent); builders return ready-to-write ``bytes``.
Validation that only needs the frame itself (lengths, stream 0 or not, padding) lives here and
raises ``ConnectionError_``/``StreamError`` carrying the RFC error code; validation that needs
connection state lives with the endpoint.
"""

from __future__ import annotations

import struct
from enum import IntEnum

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

DEFAULT_WINDOW = 65535
DEFAULT_MAX_FRAME = 16384
MAX_FRAME_LIMIT = (1 << 24) - 1
MAX_WINDOW = (1 << 31) - 1

# Frame types.
DATA = 0x0
HEADERS = 0x1
PRIORITY = 0x2
RST_STREAM = 0x3
SETTINGS = 0x4
PUSH_PROMISE = 0x5
PING = 0x6
GOAWAY = 0x7
WINDOW_UPDATE = 0x8
CONTINUATION = 0x9

# Flags.
FLAG_END_STREAM = 0x1
FLAG_ACK = 0x1
FLAG_END_HEADERS = 0x4
FLAG_PADDED = 0x8
FLAG_PRIORITY = 0x20


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
    HEADER_TABLE_SIZE = 0x1
    ENABLE_PUSH = 0x2
    MAX_CONCURRENT_STREAMS = 0x3
    INITIAL_WINDOW_SIZE = 0x4
    MAX_FRAME_SIZE = 0x5
    MAX_HEADER_LIST_SIZE = 0x6


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


_HEADER = struct.Struct(">HBBBL")  # length (high 16, low 8), type, flags, stream id
_U32 = struct.Struct(">L")
_SETTING = struct.Struct(">HL")
_GOAWAY = struct.Struct(">LL")
_pack_header = _HEADER.pack
_unpack_header = _HEADER.unpack_from

Frame = tuple[int, int, int, bytes]  # type, flags, stream id, payload


class FrameReader:
    """Splits a byte stream into frames; keeps the tail of an incomplete frame.

    ``feed`` returns whole frames only, and copies a partial frame's bytes once when it
    completes (a large frame arriving in many reads is not re-copied per read).
    """

    __slots__ = ("_buf", "_need", "max_frame_size")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME) -> None:
        self._buf = bytearray()
        self._need = 9
        self.max_frame_size = max_frame_size

    def feed(self, data: bytes) -> list[Frame]:
        buf = self._buf
        if buf:
            buf += data
            if len(buf) < self._need:
                return []
            data = bytes(buf)
            buf.clear()
        frames: list[Frame] = []
        pos = 0
        end = len(data)
        limit = self.max_frame_size
        while end - pos >= 9:
            hi, lo, ftype, flags, sid = _unpack_header(data, pos)
            length = (hi << 8) | lo
            if length > limit:
                raise ConnectionError_(
                    ErrorCode.FRAME_SIZE_ERROR, f"frame of {length} bytes exceeds {limit}"
                )
            stop = pos + 9 + length
            if stop > end:
                self._need = 9 + length
                break
            frames.append((ftype, flags, sid & 0x7FFFFFFF, data[pos + 9 : stop]))
            pos = stop
        else:
            self._need = 9
        if pos < end:
            buf += data[pos:] if pos else data
        return frames


def frame(ftype: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    n = len(payload)
    return _pack_header(n >> 8, n & 0xFF, ftype, flags, stream_id) + payload


def frame_header(ftype: int, flags: int, stream_id: int, length: int) -> bytes:
    return _pack_header(length >> 8, length & 0xFF, ftype, flags, stream_id)


def settings_frame(settings: dict[int, int] | None = None, *, ack: bool = False) -> bytes:
    payload = b"".join(_SETTING.pack(k, v) for k, v in (settings or {}).items())
    return frame(SETTINGS, FLAG_ACK if ack else 0, 0, payload)


def ping_frame(opaque: bytes, *, ack: bool = False) -> bytes:
    return frame(PING, FLAG_ACK if ack else 0, 0, opaque)


def window_update_frame(stream_id: int, increment: int) -> bytes:
    return frame(WINDOW_UPDATE, 0, stream_id, _U32.pack(increment))


def rst_stream_frame(stream_id: int, code: int) -> bytes:
    return frame(RST_STREAM, 0, stream_id, _U32.pack(code))


def goaway_frame(last_stream_id: int, code: int, debug: bytes = b"") -> bytes:
    return frame(GOAWAY, 0, 0, _GOAWAY.pack(last_stream_id, code) + debug)


def headers_frames(stream_id: int, block: bytes, max_frame_size: int, end_stream: bool) -> bytes:
    """HEADERS (+ CONTINUATION frames when the block exceeds the peer's frame size)."""
    flags = FLAG_END_STREAM if end_stream else 0
    n = len(block)
    if n <= max_frame_size:
        return _pack_header(n >> 8, n & 0xFF, HEADERS, flags | FLAG_END_HEADERS, stream_id) + block
    parts = [frame(HEADERS, flags, stream_id, block[:max_frame_size])]
    pos = max_frame_size
    while pos < n:
        chunk = block[pos : pos + max_frame_size]
        pos += max_frame_size
        parts.append(frame(CONTINUATION, FLAG_END_HEADERS if pos >= n else 0, stream_id, chunk))
    return b"".join(parts)


def parse_settings(payload: bytes) -> list[tuple[int, int]]:
    if len(payload) % 6:
        raise ConnectionError_(ErrorCode.FRAME_SIZE_ERROR, "SETTINGS length not a multiple of 6")
    return [_SETTING.unpack_from(payload, i) for i in range(0, len(payload), 6)]


def parse_u32(payload: bytes, what: str) -> int:
    if len(payload) != 4:
        raise ConnectionError_(ErrorCode.FRAME_SIZE_ERROR, f"{what} payload is not 4 bytes")
    return _U32.unpack(payload)[0]


def parse_goaway(payload: bytes) -> tuple[int, int, bytes]:
    """(last stream id, error code, debug data)."""
    if len(payload) < 8:
        raise ConnectionError_(ErrorCode.FRAME_SIZE_ERROR, "GOAWAY payload shorter than 8 bytes")
    last, code = _GOAWAY.unpack_from(payload)
    return last & 0x7FFFFFFF, code, payload[8:]


def strip_padding(flags: int, payload: bytes) -> bytes:
    """A DATA/HEADERS payload without its padding (PROTOCOL_ERROR when the padding is bad)."""
    if not flags & FLAG_PADDED:
        return payload
    if not payload:
        raise ConnectionError_(ErrorCode.PROTOCOL_ERROR, "PADDED frame without a pad length")
    pad = payload[0]
    if pad >= len(payload):
        raise ConnectionError_(ErrorCode.PROTOCOL_ERROR, "padding exceeds the frame payload")
    return payload[1 : len(payload) - pad]


def header_fragment(flags: int, payload: bytes) -> bytes:
    """The header block fragment of a HEADERS payload (padding and priority removed)."""
    payload = strip_padding(flags, payload)
    if flags & FLAG_PRIORITY:
        if len(payload) < 5:
            raise ConnectionError_(ErrorCode.FRAME_SIZE_ERROR, "HEADERS priority fields truncated")
        payload = payload[5:]
    return payload
