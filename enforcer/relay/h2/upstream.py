"""The relay's client connection to an upstream socket (containerd's): ``Upstream``.

One per upstream socket and downstream connection: connecting, opening streams as the peer's
limits allow, stream ids, GOAWAY, and losing the connection. Upstream stream ids are ours,
allocated when a stream is actually opened upstream. Streams refused by an upstream GOAWAY are
answered UNAVAILABLE rather than retried.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Protocol

from enforcer.relay.h2.connection import Endpoint, Source
from enforcer.relay.h2.flow import Host, header_list_size
from enforcer.relay.h2.framing import (
    MAX_WINDOW,
    PREFACE,
    ConnectionError_,
    ErrorCode,
    Setting,
    StreamError,
    code_name,
    goaway_frame,
)
from enforcer.relay.h2.grpc_wire import INTERNAL, RESOURCE_EXHAUSTED, UNAVAILABLE
from enforcer.relay.h2.half import Half
from enforcer.relay.h2.header_codec import HeaderList
from enforcer.relay.h2.streams import Mode, Stream
from enforcer.relay.h2.windows import Q_HEADERS

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 5.0


class Owner(Source, Protocol):
    """The connection from kubelet an upstream connection works for (``downstream.Downstream``)."""

    closed: bool
    upstreams: dict[str, Upstream]

    def upstream(self, target: str) -> Upstream: ...


class Upstream(Endpoint):
    """Our client connection to one upstream socket, on behalf of one downstream connection."""

    role = "upstream"

    def __init__(self, relay: Host, owner: Owner, target: str) -> None:
        super().__init__(relay)
        self.owner = owner
        self.target = target
        self.ready = False
        self.going_away = False
        self.next_sid = 1
        self.waiting: deque[Half] = deque()  # halves not yet opened (connecting, or at limit)
        self._connect_task: asyncio.Task[None] | None = None

    def _extra_settings(self) -> dict[int, int]:
        return {Setting.ENABLE_PUSH: 0}

    def _sources(self) -> list[Source]:
        return [self.owner]

    def connect(self) -> None:
        self._connect_task = self.relay.spawn(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(
                loop.create_unix_connection(lambda: self, self.target), CONNECT_TIMEOUT
            )
        except (TimeoutError, OSError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else repr(exc)
            log.warning("upstream %s is unavailable: %s", self.target, reason)
            self._fail_all(f"upstream {self.target} is unavailable: {reason}")
            self.closed = True
            self.relay.flush()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        if self.closed:  # abandoned while connecting
            transport.close()
            return
        self.emit(PREFACE)
        self._start(transport)  # type: ignore[arg-type]
        if self._paused_by:  # its downstream was not draining while we connected
            transport.pause_reading()  # type: ignore[attr-defined]
        self.ready = True
        self._open_waiting()
        self.relay.flush()

    def open(self, stream: Stream, headers: HeaderList, end: bool) -> bool:
        """Open ``stream`` here (now, or once the connection is up); False when it was answered
        by the relay instead (its headers are over the runtime's header list size)."""
        limit = self.peer_max_header_list
        if limit and (size := header_list_size(headers)) > limit:
            stream.mode = Mode.DONE
            stream.answer(
                RESOURCE_EXHAUSTED,
                f"relay: request headers of {size} bytes exceed the runtime's limit of {limit}",
            )
            return False
        up = Half(self, stream, 0)
        up.peer = stream.down
        stream.down.peer = up
        stream.up = up
        if (
            self.ready
            and not self.waiting
            and len(self.streams) < self.peer_max_streams
            and self.next_sid <= MAX_WINDOW
        ):  # the common case: open it right now
            up.sid = self._take_sid(up)
            self.streams[up.sid] = up
            self._emit_headers(up, headers, end)
            return True
        up.park((Q_HEADERS, headers, end))
        self.waiting.append(up)
        if self.ready:
            self._open_waiting()
        return True

    def adopt(self, h: Half) -> None:
        """Take over a not-yet-opened half from a connection that went away."""
        h.conn = self
        h.window = self.peer_initial_window
        self.waiting.append(h)
        if self.ready:
            self._open_waiting()

    def _open_waiting(self) -> None:
        waiting = self.waiting
        while waiting and len(self.streams) < self.peer_max_streams:
            h = waiting.popleft()
            if h.local_ended:  # reset before it was opened
                continue
            if self.next_sid > MAX_WINDOW:  # stream ids exhausted: continue on a new connection
                self.going_away = True
                waiting.appendleft(h)
                self._move_waiting()
                return
            h.sid = self._take_sid(h)
            h.window = self.peer_initial_window
            self.streams[h.sid] = h
            self._drain(h)

    def _take_sid(self, h: Half) -> int:
        """The stream id for ``h``: the call's id on kubelet's connection when it is still free
        here (ids may skip, RFC 9113 5.1.1), so that the call's DATA frames can pass through as
        they came (``send_data``); otherwise the next one."""
        sid = self.next_sid
        down_sid = h.stream.down.sid
        if down_sid > sid:
            sid = down_sid
        self.next_sid = sid + 2
        return sid

    def _move_waiting(self) -> None:
        waiting, self.waiting = self.waiting, deque()
        if waiting and not self.owner.closed:
            fresh = self.owner.upstream(self.target)
            for h in waiting:
                if not h.local_ended:
                    fresh.adopt(h)

    def _idle(self, sid: int) -> bool:
        return not sid & 1 or sid >= self.next_sid

    def _on_header_list(self, sid: int, headers: HeaderList, end: bool) -> None:
        h = self.streams.get(sid)
        if h is None:
            if self._idle(sid):
                raise ConnectionError_(ErrorCode.PROTOCOL_ERROR, f"HEADERS on idle stream {sid}")
            return
        if h.remote_ended:
            raise StreamError(sid, ErrorCode.STREAM_CLOSED, "HEADERS after END_STREAM")
        h.stream.on_headers(h, headers, end)

    def _settings_changed(self) -> None:
        if self.waiting:
            self._open_waiting()

    def _half_failed(self, h: Half, exc: StreamError) -> None:
        h.stream.fail(INTERNAL, f"relay: upstream {self.target} stream error: {exc}")

    def headers_too_large(self, h: Half, size: int) -> None:
        """Request trailers over the runtime's SETTINGS_MAX_HEADER_LIST_SIZE."""
        h.stream.fail(
            RESOURCE_EXHAUSTED,
            f"relay: request trailers of {size} bytes exceed the runtime's limit of "
            f"{self.peer_max_header_list}",
        )

    def _stream_closed(self) -> None:
        if self.waiting:
            self._open_waiting()
        elif self.going_away and not self.streams:
            self.close()

    def _peer_going_away(self, last: int, code: int, debug: bytes) -> None:
        self.going_away = True
        if self.owner.upstreams.get(self.target) is self:
            del self.owner.upstreams[self.target]
        if code != ErrorCode.NO_ERROR:
            log.warning("upstream %s sent GOAWAY %s: %r", self.target, code_name(code), debug)
        for sid, h in list(self.streams.items()):
            if sid > last:  # never processed by the upstream
                h.stream.fail(
                    UNAVAILABLE, f"upstream {self.target} went away before handling the call"
                )
        self._move_waiting()
        if not self.streams:
            self.close()

    def _fail_all(self, message: str) -> None:
        halves = list(self.streams.values()) + list(self.waiting)
        self.streams.clear()
        self.waiting.clear()
        for h in halves:
            h.local_ended = h.remote_ended = True
            h.stream.fail(UNAVAILABLE, message)

    def close(self) -> None:
        if self.transport is None:
            self.closed = True
            if self._connect_task is not None:
                self._connect_task.cancel()
            return
        if not self.closed:
            self.emit(goaway_frame(0, ErrorCode.NO_ERROR))
        super().close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.ready = False
        self._release_all()
        if self.owner.upstreams.get(self.target) is self:
            del self.owner.upstreams[self.target]
        reason = self._error or (str(exc) if exc else "connection closed")
        if self.streams or self.waiting:
            log.warning("connection to upstream %s lost with calls in flight: %s",
                        self.target, reason)  # fmt: skip
        self._fail_all(f"connection to upstream {self.target} lost: {reason}")
        self.relay.flush()
