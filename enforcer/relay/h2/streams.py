"""One call across the relay: its two halves, its state, and its interception.

A call has a half on each connection (``half.Half``: windows, queue, ends) and one state machine
(``Stream``): passing frames through, or collecting the request, running the interceptor,
forwarding or refusing, ``on_response``, taps.

Limits, by design: intercepted methods must be unary-request (one uncompressed message; other
shapes are answered UNIMPLEMENTED), and their request, like a buffered ``on_response``
response, is held in memory whole: at most MAX_INTERCEPTED_MESSAGE bytes each, and at most
MAX_HELD bytes of such requests, responses and tapped copies per downstream connection, and
MAX_HELD_TOTAL for all (a call past it is answered RESOURCE_EXHAUSTED; a tap past it is
skipped for that call).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol, cast

import grpc

from enforcer.relay.h2.framing import ErrorCode, code_name
from enforcer.relay.h2.grpc_wire import (
    CANCELLED,
    DEADLINE_EXCEEDED,
    INTERNAL,
    RESOURCE_EXHAUSTED,
    UNAVAILABLE,
    UNIMPLEMENTED,
    format_grpc_timeout,
    parse_grpc_timeout,
    response_of,
    status_headers,
)
from enforcer.relay.h2.half import Half, Link, Relay
from enforcer.relay.h2.header_codec import HeaderList
from enforcer.relay.h2.intercept import (
    AnswerHere,
    Call,
    Forward,
    Interceptor,
    Response,
    Tap,
)

log = logging.getLogger(__name__)

# Unary messages the relay collects for an interceptor (containerd takes at most 16 MiB), and
# what a downstream connection's calls may hold in the relay at once (collected requests, held
# responses, tapped copies).
MAX_INTERCEPTED_MESSAGE = 16 << 20
MAX_HELD = 32 << 20
MAX_HELD_TOTAL = 64 << 20  # the same, for all connections together


class Mode(Enum):
    """Where a call is in the relay."""

    PASS = "pass"  # passing frames both ways untouched
    COLLECT = "collect"  # collecting an intercepted call's request
    INTERCEPTING = "intercepting"  # the interceptor runs
    BUFFER = "buffer"  # holding the upstream's response for an on_response hook
    DONE = "done"  # answered or gone: what still comes is dropped
    TEE = "tee"  # passing the response through, keeping a copy for an on_response observer
    TAP = "tap"  # passing both ways untouched, keeping copies of both for a tap


# The members as module constants for the per-frame paths: in Python 3.11 an Enum member's
# lookup on its class costs about five times a global's.
PASS, COLLECT, INTERCEPTING, BUFFER, DONE, TEE, TAP = Mode


class Kubelet(Link, Protocol):
    """The connection from kubelet a call came on (``downstream.Downstream``)."""

    held: int  # bytes its calls hold in the relay (MAX_HELD)

    def open_upstream(self, stream: Stream, headers: HeaderList, end: bool) -> bool: ...


@dataclass(slots=True)
class Interception:
    interceptor: Interceptor | None  # None for a tap
    request_headers: HeaderList
    started: float
    parts: list[bytes] = field(default_factory=list)
    size: int = 0
    on_response: Callable[[Response], Awaitable[None]] | None = None
    response_blocks: list[HeaderList] = field(default_factory=list)
    response_data: list[bytes] = field(default_factory=list)
    delivering: bool = False
    copy_dropped: bool = False  # a TEE copy went over MAX_HELD: the observer gets no message


class Stream:
    """One call: its downstream half, its upstream half (once routed) and its relay state."""

    __slots__ = (
        "down",
        "held",
        "icpt",
        "method",
        "mode",
        "relay",
        "started",
        "status",
        "tap",
        "up",
    )

    def __init__(self, relay: Relay, method: str) -> None:
        self.relay = relay
        self.method = method
        self.mode = PASS
        self.started = 0.0  # set when the relay has an observer
        self.status = -1  # the gRPC status sent downstream, once it is
        self.down: Half = None  # type: ignore[assignment]  # set right after construction
        self.up: Half | None = None
        self.icpt: Interception | None = None
        self.tap: Tap | None = None
        self.held = 0  # bytes this call holds against its connection's MAX_HELD

    def _hold(self, n: int) -> bool:
        """Count ``n`` more bytes this call keeps; False when its connection has no room."""
        conn = cast(Kubelet, self.down.conn)
        relay = self.relay
        if conn.held + n > MAX_HELD or relay.held + n > MAX_HELD_TOTAL:
            return False
        conn.held += n
        relay.held += n
        self.held += n
        return True

    def release_held(self) -> None:
        """The call is over on its downstream connection: what it held is free again."""
        held = self.held
        if held:
            self.held = 0
            cast(Kubelet, self.down.conn).held -= held
            self.relay.held -= held

    # --- frames from either side

    def on_headers(self, h: Half, headers: HeaderList, end: bool) -> None:
        if end:
            h.remote_ended = True
        if h is self.down:  # request trailers (gRPC clients send none, HTTP/2 allows them)
            if self.mode in (PASS, TAP) and self.up is not None:
                self.up.conn.send_headers(self.up, headers, end)
            elif self.mode == COLLECT and end:
                self._collected()
            h.conn.closed_remote(h)
            return
        if self.mode == BUFFER:
            assert self.icpt is not None
            self.icpt.response_blocks.append(headers)
            if end:
                self._response_complete()
        else:
            down = self.down
            down.conn.send_headers(down, headers, end)
            if self.mode == TEE or self.mode == TAP:
                self._tee_headers(headers, end)
        if end:
            self._upstream_finished()

    def on_data(self, h: Half, data: bytes, end: bool, raw: bytes | None = None) -> None:
        """DATA from the peer of ``h``; ``raw``: the frame as it came, if it may pass unchanged."""
        if end:
            h.remote_ended = True
        mode = self.mode
        if mode in (PASS, TAP) or (mode == TEE and h is not self.down):
            peer = h.peer
            if peer is None or peer.local_ended:
                h.credit(len(data))  # nowhere to go: consume
            else:
                # The same frame, byte for byte, when the call has the same stream id there.
                peer.conn.send_data(peer, data, end, raw=raw if peer.sid == h.sid else None)
            icpt = self.icpt
            if mode != PASS and icpt is not None and not icpt.copy_dropped:
                if not self._hold(len(data)):
                    self._drop_copies()
                elif h is self.down:
                    icpt.parts.append(data)
                else:
                    icpt.response_data.append(data)
        elif h is self.down:
            h.credit(len(data))
            if mode == COLLECT:
                icpt = self.icpt
                assert icpt is not None
                icpt.size += len(data)
                if icpt.size > MAX_INTERCEPTED_MESSAGE or not self._hold(len(data)):
                    self.mode = DONE
                    self.answer(RESOURCE_EXHAUSTED, f"request to {self.method} is too large")
                    return
                icpt.parts.append(data)
                if end:
                    self._collected()
        elif mode == BUFFER:  # the upstream's response to an on_response call
            h.credit(len(data))
            icpt = self.icpt
            assert icpt is not None
            icpt.size += len(data)
            if icpt.size > MAX_INTERCEPTED_MESSAGE or not self._hold(len(data)):
                self.fail(RESOURCE_EXHAUSTED, f"response of {self.method} is too large")
                return
            icpt.response_data.append(data)
            if end:
                self._response_complete()
        else:  # the call is over: what still comes is dropped
            h.credit(len(data))
        if end:
            if h is self.down:
                h.conn.closed_remote(h)
            else:
                self._upstream_finished()

    def _drop_copies(self) -> None:
        """No room for a tapped or observed call's copies: pass it on untouched from now on."""
        icpt = self.icpt
        assert icpt is not None
        log.warning("relay: no room to copy %s; its tap or observer sees no message", self.method)
        icpt.parts, icpt.response_data = [], []
        icpt.copy_dropped = True
        if self.mode == TAP:
            self.mode = PASS  # the tap is skipped for this call
        # TEE: the observer still hears how the call ended, without the message

    def on_reset(self, h: Half, code: int) -> None:
        """The peer of ``h`` reset the stream."""
        h.conn.forget(h)
        if h is self.down:
            self.client_gone(code)
        elif self.mode == BUFFER:
            status = UNAVAILABLE if code == ErrorCode.REFUSED_STREAM else INTERNAL
            self.fail(status, f"upstream reset the stream ({code_name(code)})")
        else:
            down = self.down
            down.conn.reset(down, code)

    # --- lifecycle

    def _upstream_finished(self) -> None:
        """The upstream sent END_STREAM: the call is over there."""
        up = self.up
        assert up is not None
        if up.local_ended:
            up.conn.forget(up)
        else:
            # The response is complete but the request is not: tell the server to stop
            # waiting (as gRPC servers do to clients), and drop the rest of the request.
            up.conn.reset(up, ErrorCode.NO_ERROR)

    def client_gone(self, code: int) -> None:
        """The client reset the stream or its connection died."""
        self.mode, old_mode = DONE, self.mode
        up = self.up
        if up is not None:
            up.conn.reset(up, code if code != ErrorCode.NO_ERROR else ErrorCode.CANCEL)
        icpt = self.icpt
        if old_mode == BUFFER and icpt is not None and not icpt.delivering:
            self._deliver(Response(CANCELLED, "the client cancelled the call", None), None)

    def fail(self, code: int, message: str) -> None:
        """End the call with ``code``: the upstream stream (if any) is reset, the client gets
        the status (after ``on_response`` has seen it, for a call that has one)."""
        up = self.up
        if up is not None:
            up.conn.reset(up, ErrorCode.CANCEL)
        icpt = self.icpt
        if self.mode == BUFFER and icpt is not None:
            if not icpt.delivering:
                self._deliver(Response(code, message, None), (code, message))
            return
        self.mode = DONE
        self.answer(code, message)

    def answer(self, code: int, message: str) -> None:
        """Finish the call downstream with a gRPC status of the relay's own."""
        down = self.down
        if down.local_ended:
            return
        down.conn.clear_queue(down)
        down.conn.send_headers(down, status_headers(code, message, not down.headers_sent), True)

    # --- interception

    def _collected(self) -> None:
        """The whole request of an intercepted call is here: run the interceptor."""
        icpt = self.icpt
        assert icpt is not None
        body = b"".join(icpt.parts)
        icpt.parts = []
        self.mode = INTERCEPTING
        if len(body) < 5:
            self.mode = DONE
            self.answer(INTERNAL, f"relay: {self.method} request carries no message")
            return
        length = int.from_bytes(body[1:5], "big")
        if body[0] != 0:
            self.mode = DONE
            self.answer(
                UNIMPLEMENTED, f"relay: compressed requests to {self.method} are not supported"
            )
            return
        if len(body) != 5 + length:
            self.mode = DONE
            self.answer(
                UNIMPLEMENTED,
                f"relay: {self.method} is intercepted and must carry exactly one message",
            )
            return
        metadata = [
            (name.decode("latin-1"), value.decode("latin-1"))
            for name, value in icpt.request_headers
            if not name.startswith(b":")
        ]
        call = Call(self.method, metadata, body[5:])
        self.relay.spawn(self._intercept(call))

    async def _intercept(self, call: Call) -> None:
        icpt = self.icpt
        assert icpt is not None and icpt.interceptor is not None  # taps are never run
        try:
            decision = await icpt.interceptor(call)
            if not isinstance(decision, (Forward, AnswerHere)):
                raise TypeError(f"interceptor returned {type(decision).__name__}")
        except Exception as exc:
            log.exception("interceptor for %s failed", self.method)
            decision = AnswerHere(grpc.StatusCode.INTERNAL, str(exc) or type(exc).__name__)
        if self.mode != INTERCEPTING:  # the client went away meanwhile
            # A Forward never sent still has its hook told, so what the interceptor prepared
            # (CPUs set aside for a container) is not left waiting for an answer forever.
            if isinstance(decision, Forward) and decision.on_response is not None:
                self._never_sent(decision, CANCELLED, "the client went away before the call")
            return
        try:
            if isinstance(decision, AnswerHere):
                self.mode = DONE
                code = decision.code
                self.answer(
                    code.value[0] if isinstance(code, grpc.StatusCode) else int(code),
                    decision.message,
                )
            else:
                self._forward(decision)
        finally:
            self.relay.flush()

    def _forward(self, decision: Forward) -> None:
        icpt = self.icpt
        assert icpt is not None
        headers = []
        for name, value in icpt.request_headers:
            if name == b"content-length":  # the message may have changed size
                continue
            if name == b"grpc-timeout":
                # Time spent in the interceptor is gone from the client's deadline.
                budget = parse_grpc_timeout(value)
                if budget is not None:
                    left = budget - (time.monotonic() - icpt.started)
                    if left <= 0:
                        self.mode = DONE
                        self.answer(DEADLINE_EXCEEDED, "deadline exceeded in the relay")
                        if decision.on_response is not None:
                            self._never_sent(
                                decision, DEADLINE_EXCEEDED, "deadline exceeded in the relay"
                            )
                        return
                    value = format_grpc_timeout(left)
            headers.append((name, value))
        if decision.on_response is not None:
            icpt.on_response = decision.on_response
            self.mode = BUFFER if decision.hold else TEE
        else:
            self.mode = PASS
        message = decision.message
        down = self.down
        # The downstream half is always on the connection from kubelet.
        if not cast(Kubelet, down.conn).open_upstream(self, headers, False):
            return
        up = self.up
        assert up is not None
        icpt.size = 0  # from here on, it counts the response held for on_response
        up.conn.send_data(up, len(message).to_bytes(5, "big") + message, True, own=True)

    def _never_sent(self, decision: Forward, code: int, message: str) -> None:
        assert decision.on_response is not None
        self.relay.spawn(self._observe(decision.on_response, Response(code, message, None)))

    def _tee_headers(self, headers: HeaderList, end: bool) -> None:
        icpt = self.icpt
        assert icpt is not None
        icpt.response_blocks.append(headers)
        if end:  # read once the response is on its way to the client
            self.relay.after_writes(self._teed)

    def _teed(self) -> None:
        """A tapped or observed call is over: its copies to the tap, or to the observer."""
        icpt = self.icpt
        assert icpt is not None
        response = response_of(icpt.response_blocks, b"".join(icpt.response_data))
        if icpt.copy_dropped:
            response = Response(response.status, response.details, None)
        icpt.response_blocks, icpt.response_data = [], []
        if self.tap is not None:
            body = b"".join(icpt.parts)
            icpt.parts = []
            try:
                # A unary request's one message, without its 5-byte gRPC prefix.
                self.tap(body[5:] if len(body) >= 5 and body[0] == 0 else b"", response)
            except Exception:
                log.exception("tap for %s failed", self.method)
        elif icpt.on_response is not None:
            self.relay.spawn(self._observe(icpt.on_response, response))

    async def _observe(
        self, hook: Callable[[Response], Awaitable[None]], response: Response
    ) -> None:
        try:
            await hook(response)
        except Exception:
            log.exception("on_response observer for %s failed", self.method)

    def _response_complete(self) -> None:
        icpt = self.icpt
        assert icpt is not None
        response = response_of(icpt.response_blocks, b"".join(icpt.response_data))
        self._deliver(response, None)

    def _deliver(self, response: Response, failure: tuple[int, str] | None) -> None:
        """Run on_response, then release the buffered response (or ``failure``) downstream."""
        icpt = self.icpt
        assert icpt is not None and icpt.on_response is not None
        icpt.delivering = True
        self.relay.spawn(self._run_on_response(icpt.on_response, response, failure))

    async def _run_on_response(
        self,
        hook: Callable[[Response], Awaitable[None]],
        response: Response,
        failure: tuple[int, str] | None,
    ) -> None:
        try:
            await hook(response)
        except Exception as exc:
            log.exception("on_response hook for %s failed", self.method)
            failure = (INTERNAL, f"relay: on_response for {self.method} failed: {exc}")
        if self.mode == DONE:  # the client went away: nobody to answer
            return
        self.mode = DONE
        icpt = self.icpt
        assert icpt is not None
        try:
            if failure is not None:
                self.answer(*failure)
                return
            down = self.down
            conn = down.conn
            blocks = icpt.response_blocks
            data = icpt.response_data
            if not blocks:
                self.answer(INTERNAL, "relay: upstream response had no headers")
                return
            tail = blocks[1:]  # trailers (none for a trailers-only response)
            conn.send_headers(down, blocks[0], not data and not tail)
            for i, chunk in enumerate(data):
                conn.send_data(down, chunk, not tail and i == len(data) - 1, own=True)
            for i, block in enumerate(tail):
                conn.send_headers(down, block, i == len(tail) - 1)
        finally:
            self.relay.flush()
