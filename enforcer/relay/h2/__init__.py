"""An HTTP/2 intermediary for gRPC over unix sockets, with call interception.

kubelet connects to our unix socket as if it were the runtime. Each accepted (downstream)
connection is a full HTTP/2 server endpoint; for it we open, lazily, one HTTP/2 client
(upstream) connection per upstream socket that its calls are routed to. Frame-level and
dependency-free, one module per job:

- ``frames``: HTTP/2 framing; ``hpack``: header compression;
- ``grpc_wire``: gRPC on HTTP/2 (status codes and trailers, grpc-message, grpc-timeout);
- ``intercept``: the interception API (``Call``, ``Forward``, ``Refuse``, taps, observers);
- ``streams``: one call across the relay, and its interception;
- ``flow``: flow control (our windows, sending within the peer's);
- ``connection``: one HTTP/2 connection, either side;
- ``downstream``, ``upstream``: kubelet's connections, and ours to the runtime;
- ``server``: the listening socket and ``serve_relay``.

Names with a leading underscore are the package's internals, shared between its modules. The
public surface is re-exported here.

Limits, by design: intercepted methods must be unary-request (see ``streams``); peers'
SETTINGS_MAX_HEADER_LIST_SIZE is not enforced in either direction; streams refused by an
upstream GOAWAY are answered UNAVAILABLE rather than retried; no TLS (unix sockets only).
"""

from enforcer.relay.h2.intercept import (
    Call,
    Forward,
    Interceptor,
    Observer,
    Refuse,
    Response,
    Route,
    Tap,
    TapFactory,
)
from enforcer.relay.h2.server import RelayServer, serve_relay

__all__ = [
    "Call",
    "Forward",
    "Interceptor",
    "Observer",
    "Refuse",
    "RelayServer",
    "Response",
    "Route",
    "Tap",
    "TapFactory",
    "serve_relay",
]
