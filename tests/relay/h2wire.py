"""HTTP/2 frames for the test peers: read and built with hyperframe, plus raw frames for the
malformed input hyperframe will not build (a test must be able to send what no library would).

A frame read back is a tuple ``(type, flags, stream id, payload)`` with the payload as sent
(the relay never pads), so tests compare bytes on the wire.
"""

from __future__ import annotations

import struct

from hyperframe.frame import (
    ContinuationFrame,
    DataFrame,
    Frame,
    GoAwayFrame,
    HeadersFrame,
    SettingsFrame,
)

from enforcer.relay.h2.framing import (
    CONTINUATION,
    DATA,
    GOAWAY,
    HEADERS,
    MAX_FRAME_LIMIT,
    PING,
    PREFACE,
    PRIORITY,
    PUSH_PROMISE,
    RST_STREAM,
    SETTINGS,
    WINDOW_UPDATE,
    ErrorCode,
    Setting,
    goaway_frame,
    ping_frame,
    rst_stream_frame,
    settings_frame,
    window_update_frame,
)

__all__ = [
    "CONTINUATION",
    "DATA",
    "GOAWAY",
    "HEADERS",
    "MAX_FRAME_LIMIT",
    "PING",
    "PREFACE",
    "PRIORITY",
    "PUSH_PROMISE",
    "RST_STREAM",
    "SETTINGS",
    "WINDOW_UPDATE",
    "ErrorCode",
    "Setting",
    # the control frames the relay itself sends, built the same way for the test peers
    "goaway_frame",
    "ping_frame",
    "rst_stream_frame",
    "settings_frame",
    "window_update_frame",
]

FLAG_END_STREAM = 0x1
FLAG_ACK = 0x1
FLAG_END_HEADERS = 0x4
FLAG_PADDED = 0x8
FLAG_PRIORITY = 0x20

Wire = tuple[int, int, int, bytes]  # type, flags, stream id, payload
_HEADER = struct.Struct(">HBBBL")


def frame_header(ftype: int, flags: int, stream_id: int, length: int) -> bytes:
    """A raw 9-byte frame header (for frames no library would build)."""
    return _HEADER.pack(length >> 8, length & 0xFF, ftype, flags, stream_id)


def frame(ftype: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    """A raw frame, exactly as given (for malformed ones)."""
    return frame_header(ftype, flags, stream_id, len(payload)) + payload


def data_frame(stream_id: int, payload: bytes, end: bool = False) -> bytes:
    return DataFrame(stream_id, payload, flags=["END_STREAM"] if end else []).serialize()


def headers_frames(stream_id: int, block: bytes, max_frame_size: int, end: bool) -> bytes:
    """HEADERS (+ CONTINUATION frames when the block exceeds ``max_frame_size``)."""
    chunks = [block[i : i + max_frame_size] for i in range(0, len(block), max_frame_size)] or [b""]
    first = HeadersFrame(stream_id, chunks[0], flags=["END_STREAM"] if end else [])
    if len(chunks) == 1:
        first.flags.add("END_HEADERS")
    frames: list[Frame] = [first]
    for i, chunk in enumerate(chunks[1:], 2):
        frames.append(
            ContinuationFrame(stream_id, chunk, flags=["END_HEADERS"] if i == len(chunks) else [])
        )
    return b"".join(f.serialize() for f in frames)


def parse_settings(payload: bytes) -> list[tuple[int, int]]:
    f = SettingsFrame(0)
    f.parse_body(memoryview(payload))
    return list(f.settings.items())


def parse_u32(payload: bytes, what: str = "") -> int:
    assert len(payload) == 4, f"{what} payload is not 4 bytes"
    return int.from_bytes(payload, "big")


def parse_goaway(payload: bytes) -> tuple[int, int, bytes]:
    """(last stream id, error code, debug data)."""
    f = GoAwayFrame(0)
    f.parse_body(memoryview(payload))
    return f.last_stream_id, f.error_code, f.additional_data


def header_fragment(flags: int, payload: bytes) -> bytes:
    """The header block fragment of a HEADERS payload (padding and priority removed)."""
    f = HeadersFrame(1)
    f.parse_flags(flags)
    f.parse_body(memoryview(payload))
    return f.data


class FrameReader:
    """Splits a byte stream into ``Wire`` tuples (frame headers read by hyperframe)."""

    def __init__(self, max_frame_size: int = MAX_FRAME_LIMIT) -> None:
        self._buf = b""
        self.max_frame_size = max_frame_size

    def feed(self, data: bytes) -> list[Wire]:
        buf = self._buf + data
        out: list[Wire] = []
        pos = 0
        while len(buf) - pos >= 9:
            head = memoryview(buf)[pos : pos + 9]
            f, length = Frame.parse_frame_header(head)
            assert length <= self.max_frame_size, f"frame of {length} bytes"
            if len(buf) - pos - 9 < length:
                break
            out.append((buf[pos + 3], buf[pos + 4], f.stream_id, buf[pos + 9 : pos + 9 + length]))
            pos += 9 + length
        self._buf = buf[pos:]
        return out
