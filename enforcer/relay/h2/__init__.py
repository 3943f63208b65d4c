"""An HTTP/2 intermediary for gRPC over unix sockets, with call interception.

Frame-level and dependency-free: ``frames`` (HTTP/2 framing), ``hpack`` (header compression)
and ``relay`` (the intermediary). The public surface is re-exported here.
"""

from enforcer.relay.h2.relay import (
    Call,
    Forward,
    Interceptor,
    Observer,
    Refuse,
    RelayServer,
    Response,
    Route,
    Tap,
    TapFactory,
    serve_relay,
)

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
