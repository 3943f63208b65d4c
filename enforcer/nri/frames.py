"""The NRI wire's two framings, as pure functions and bounded incremental parsers.

The multiplexer (containerd/nri ``pkg/net/multiplex``): one unix socket carries logical
connections, each frame an 8-byte header (u32 big-endian connection id, u32 payload length)
and the payload; connection 1 is the plugin service, 2 the runtime service. A logical
connection is a byte stream: a ttrpc message may span frames, and a frame may hold several.

ttrpc (containerd/ttrpc): a 10-byte header (u32 length, u32 stream id, u8 type, u8 flags) and
the message. Requests are type 1, responses type 2; a client's stream ids are odd.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

MUX_HEADER = struct.Struct(">II")
TTRPC_HEADER = struct.Struct(">IIBB")
PLUGIN_CONN = 1  # the runtime calls the plugin's service here
RUNTIME_CONN = 2  # the plugin calls the runtime's service here
MAX_MUX_PAYLOAD = 1 << 24  # the multiplexer refuses larger frames (EMSGSIZE when it writes)
MAX_MESSAGE = 4 << 20  # ttrpc's messageLengthMax: the most the runtime reads, so we send
# Go's ttrpc peer reads through a 4 KiB buffer and fails (ENOMEM) on a frame that does not
# fit what is left of it: a message is written as frames of at most this, none spanning two.
WRITE_CHUNK = 4096
# The most the runtime can send us in one message. containerd 1.7 (ttrpc v1.2.5, NRI v0.6.1)
# checks no length when it sends: its ttrpc writer (a 4 KiB bufio.Writer) sends the header
# and the first 4,086 bytes as one multiplexer frame and the rest as one more, which the
# multiplexer caps at MAX_MUX_PAYLOAD. A Synchronize holds every pod with its annotations
# (up to 256 KiB each, Kubernetes' cap): 20 such pods are already over ttrpc's 4 MiB, so the
# plugin takes whatever the runtime can send, up to this bound (docs/nri.md).
MAX_REQUEST = MAX_MUX_PAYLOAD + WRITE_CHUNK
REQUEST = 1
RESPONSE = 2


class ProtocolError(Exception):
    """The peer broke the framing: the connection must be dropped."""


def mux_frames(conn: int, data: bytes, chunk: int = WRITE_CHUNK) -> bytes:
    """``data`` (one whole ttrpc message) as multiplexer frames for connection ``conn``."""
    out = bytearray()
    for start in range(0, max(len(data), 1), chunk):
        part = data[start : start + chunk]
        out += MUX_HEADER.pack(conn, len(part))
        out += part
    return bytes(out)


def ttrpc_message(stream_id: int, kind: int, body: bytes, flags: int = 0) -> bytes:
    if len(body) > MAX_MESSAGE:
        raise ValueError(f"ttrpc message of {len(body)} bytes exceeds {MAX_MESSAGE}")
    return TTRPC_HEADER.pack(len(body), stream_id, kind, flags) + body


@dataclass(frozen=True)
class Message:
    """One ttrpc message; ``body`` is None when it was over the bound and skipped."""

    stream_id: int
    kind: int
    flags: int
    body: bytes | None
    length: int


class MuxReader:
    """Splits the socket's bytes into (connection id, payload) frames, buffering at most one
    header and one payload (``max_payload`` bytes)."""

    def __init__(self, max_payload: int = MAX_MUX_PAYLOAD) -> None:
        self.max_payload = max_payload
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        self._buf += data
        frames = []
        while len(self._buf) >= MUX_HEADER.size:
            conn, length = MUX_HEADER.unpack_from(self._buf)
            if length > self.max_payload:
                raise ProtocolError(
                    f"multiplexer frame of {length} bytes on connection {conn} exceeds "
                    f"{self.max_payload}"
                )
            end = MUX_HEADER.size + length
            if len(self._buf) < end:
                break
            frames.append((conn, bytes(self._buf[MUX_HEADER.size : end])))
            del self._buf[:end]
        return frames


class TtrpcReader:
    """Splits one logical connection's byte stream into ttrpc messages. A message longer than
    ``max_message`` is skipped without being buffered (its header is still reported, so a
    request can be answered RESOURCE_EXHAUSTED, as ttrpc does)."""

    def __init__(self, max_message: int = MAX_MESSAGE) -> None:
        self.max_message = max_message
        self._buf = bytearray()
        self._skip = 0

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def feed(self, data: bytes) -> list[Message]:
        if self._skip:
            dropped = min(self._skip, len(data))
            self._skip -= dropped
            data = data[dropped:]
        self._buf += data
        out = []
        while len(self._buf) >= TTRPC_HEADER.size:
            length, stream_id, kind, flags = TTRPC_HEADER.unpack_from(self._buf)
            if length > self.max_message:
                del self._buf[: TTRPC_HEADER.size]
                have = min(length, len(self._buf))
                del self._buf[:have]
                self._skip = length - have
                out.append(Message(stream_id, kind, flags, None, length))
                if self._skip:
                    break
                continue
            end = TTRPC_HEADER.size + length
            if len(self._buf) < end:
                break
            body = bytes(self._buf[TTRPC_HEADER.size : end])
            del self._buf[:end]
            out.append(Message(stream_id, kind, flags, body, length))
        return out
