"""gRPC on HTTP/2 as the relay reads and writes it: status codes, trailers, header values.

grpc-message and grpc-timeout values, the status trailers of the relay's own answers, the
gRPC status a response's last header block stands for, and the Response an upstream's buffered
answer stands for. Message framing (the 5-byte prefix: compressed flag, big-endian length) is
read where the messages are: ``streams`` collects an intercepted request, ``response_of``
reads a response.
"""

from __future__ import annotations

from urllib.parse import unquote_to_bytes

import grpc

from enforcer.relay.h2.header_codec import HeaderList, SharedHeaders
from enforcer.relay.h2.intercept import Response

UNAVAILABLE = grpc.StatusCode.UNAVAILABLE.value[0]
INTERNAL = grpc.StatusCode.INTERNAL.value[0]
UNIMPLEMENTED = grpc.StatusCode.UNIMPLEMENTED.value[0]
CANCELLED = grpc.StatusCode.CANCELLED.value[0]
DEADLINE_EXCEEDED = grpc.StatusCode.DEADLINE_EXCEEDED.value[0]
RESOURCE_EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
UNKNOWN = grpc.StatusCode.UNKNOWN.value[0]

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


def status_headers(code: int, message: str, with_status: bool) -> HeaderList:
    headers: HeaderList = []
    if with_status:  # trailers-only response: the HTTP head goes in the same block
        headers += [(b":status", b"200"), (b"content-type", b"application/grpc")]
    headers.append((b"grpc-status", b"%d" % code))
    if message:
        headers.append((b"grpc-message", percent_encode(message)))
    return headers


def final_status(headers: HeaderList) -> int:
    """The gRPC status a block that ends a response stands for, as a gRPC client reads it."""
    if type(headers) is SharedHeaders:  # never changed: read once
        status = headers.status
        if status is None:
            status = headers.status = read_status(headers)
        return status
    return read_status(headers)


def read_status(headers: HeaderList) -> int:
    http = b""
    for name, value in headers:
        if name == b"grpc-status":
            return int(value) if value.isdigit() else UNKNOWN
        if name == b":status":
            http = value
    if http and http != b"200" and http.isdigit():
        return _HTTP_TO_GRPC.get(int(http), UNKNOWN)
    return UNKNOWN


def response_of(blocks: list[HeaderList], body: bytes) -> Response:
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
        code = _HTTP_TO_GRPC.get(int(http), UNKNOWN)
        return Response(code, f"upstream answered HTTP status {http.decode()}", None)
    return Response(UNKNOWN, "upstream response carried no grpc-status", message)
