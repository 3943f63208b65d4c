"""The interception API: what interceptors, taps and observers are given and what they answer.

Calls whose ``:path`` is in ``intercepts`` are collected (unary request), handed to the
interceptor as a ``Call`` in their own task, and then refused by the relay itself or forwarded,
possibly rewritten; ``Forward.on_response`` sees the upstream's answer before it is released
downstream. A tap watches a call it never holds up; an observer is told about every finished
call. How the relay carries these out is in ``streams``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import grpc


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
class AnswerHere:
    """Answer the call in the relay with ``code``/``message``; the upstream never sees it."""

    code: grpc.StatusCode
    message: str = ""


Interceptor = Callable[[Call], Awaitable[Forward | AnswerHere]]
# A tap watches a call it never holds up: made when the call starts (so it can note the
# moment), called on the event loop once the upstream has answered, with the request message
# and the response. It must be quick and must not raise.
Tap = Callable[[bytes, Response], None]
TapFactory = Callable[[], Tap]
Route = Callable[[str], str]
# Told once per finished call: (method path, gRPC status the client got, seconds since its
# request headers arrived). Runs on the event loop, so it must be quick and must not block.
Observer = Callable[[str, int, float], None]
