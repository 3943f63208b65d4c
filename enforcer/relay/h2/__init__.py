"""An HTTP/2 intermediary for gRPC over unix sockets, with call interception.

kubelet connects to our unix socket as if it were the runtime. Each accepted (downstream)
connection is a full HTTP/2 server endpoint; for it we open, lazily, one HTTP/2 client
(upstream) connection per upstream socket that its calls are routed to. Frames are parsed and
built by ``hyperframe`` and header blocks by ``hpack`` (the python-hyper libraries); stream
routing, flow control and interception are the relay's own. One module per job:

- ``framing``: HTTP/2 frames on hyperframe (reader, writer, builders, error codes);
- ``header_codec``: HPACK on hpack (a bounded decoder, a never-indexing encoder);
- ``grpc_wire``: gRPC on HTTP/2 (status codes and trailers, grpc-message, grpc-timeout);
- ``intercept``: the interception API (``Call``, ``Forward``, ``AnswerHere``, taps, observers);
- ``windows``: the flow-control sizes;
- ``half``: one stream on one connection, and the Protocols by which a call, its connections
  and the server reach each other without importing each other;
- ``streams``: one call across the relay (its ``Mode``), and its interception;
- ``flow``: flow control (our windows, sending within the peer's);
- ``floods``: counting frames that make work without moving a call (PING, SETTINGS, resets);
- ``connection``: one HTTP/2 connection, either side;
- ``downstream``, ``upstream``: kubelet's connections, and ours to the runtime;
- ``server``: the listening socket and ``serve_relay``.

Imports between these modules go one way, bottom to top (an import-linter contract in
pyproject.toml); no private name crosses a module. The public surface is re-exported here.

Bounds (docs/security.md lists them): header lists (SETTINGS_MAX_HEADER_LIST_SIZE, announced
and enforced both ways), concurrent streams (SETTINGS_MAX_CONCURRENT_STREAMS), what the relay
buffers (its flow-control windows, socket write buffers with high and low water marks that
pause the reading of the other side, ``streams.MAX_HELD``), and floods of CONTINUATION, PING,
SETTINGS and RST_STREAM frames (GOAWAY ENHANCE_YOUR_CALM).

Limits, by design: intercepted methods must be unary-request (see ``streams``); streams
refused by an upstream GOAWAY are answered UNAVAILABLE rather than retried; no TLS (unix
sockets only).
"""

from enforcer.relay.h2.intercept import (
    AnswerHere,
    Call,
    Forward,
    Interceptor,
    Observer,
    Response,
    Route,
    Tap,
    TapFactory,
)
from enforcer.relay.h2.server import RelayServer, serve_relay

__all__ = [
    "AnswerHere",
    "Call",
    "Forward",
    "Interceptor",
    "Observer",
    "RelayServer",
    "Response",
    "Route",
    "Tap",
    "TapFactory",
    "serve_relay",
]
