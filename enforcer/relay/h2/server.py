"""The relay's server: its listening socket and connections, and ``serve_relay``.

Accepting connections, writing out the ones with pending frames, the tasks it runs, a graceful
close. No TLS: unix sockets only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import stat
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from enforcer.relay.h2.connection import PONG_DELAY
from enforcer.relay.h2.downstream import Downstream
from enforcer.relay.h2.flow import FlowControl
from enforcer.relay.h2.grpc_wire import CANCELLED
from enforcer.relay.h2.half import CallPort
from enforcer.relay.h2.intercept import Interceptor, Observer, Route, TapFactory

log = logging.getLogger(__name__)


class RelayServer:
    """The relay's listening socket and its connections."""

    def __init__(
        self,
        relay_socket: str,
        route: Route,
        intercepts: Mapping[str, Interceptor] | None = None,
        observer: Observer | None = None,
        taps: Mapping[str, TapFactory] | None = None,
    ) -> None:
        self.socket_path = relay_socket
        self.route = route
        self.intercepts: dict[str, Interceptor] = dict(intercepts or {})
        self.taps: dict[str, TapFactory] = dict(taps or {})
        self.observer = observer
        self._server: asyncio.AbstractServer | None = None
        self.conns: set[Downstream] = set()
        self.dirty: list[FlowControl] = []
        # Calls over since the last flush, told to the observer once their frames are out;
        # what taps read of them, run then too.
        self._finished: list[CallPort] = []
        self._after: list[Callable[[], None]] = []
        # Connections with PING answers waiting (``Endpoint._pong``), written by one timer.
        self._late: dict[FlowControl, None] = {}
        self._late_timer: asyncio.TimerHandle | None = None
        self.held = 0  # bytes all calls hold in the relay (streams.MAX_HELD_TOTAL)
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = asyncio.Event()
        self._socket_inode = -1

    async def start(self) -> None:
        path = self.socket_path
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        _remove_stale_socket(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(path)
            os.chmod(path, 0o660)  # before listen(): nobody can connect in between
            self._socket_inode = os.stat(path).st_ino
            self._server = await asyncio.get_running_loop().create_unix_server(
                lambda: Downstream(self), sock=sock, backlog=128
            )
        except BaseException:
            sock.close()
            raise
        log.info("CRI relay listening on %s", path)

    def flush(self) -> None:
        """Write out every connection that has pending frames (one write each), then tell the
        observer about the calls that ended meanwhile (off the calls' own path)."""
        dirty = self.dirty
        while dirty:
            dirty.pop().write_out()
        if self._finished:
            self._report()
        if self._after:
            self._run_after()

    def late(self, conn: FlowControl) -> None:
        """``conn`` has PING answers waiting: written within PONG_DELAY if nothing else is."""
        self._late[conn] = None
        if self._late_timer is None:
            loop = asyncio.get_running_loop()
            self._late_timer = loop.call_later(PONG_DELAY, self._write_late)

    def _write_late(self) -> None:
        self._late_timer = None
        late, self._late = self._late, {}
        for conn in late:
            conn.write_out()  # (nothing else is pending: every callback ends with a flush)

    def after_writes(self, work: Callable[[], None]) -> None:
        """Run ``work`` at the end of this flush, once the frames are written (it may not
        write any: a tap's reading of a call it passed on)."""
        self._after.append(work)

    def _run_after(self) -> None:
        after, self._after = self._after, []
        for work in after:
            try:
                work()
            except Exception:
                log.exception("relay: work after the writes failed")

    def finished(self, stream: CallPort) -> None:
        """``stream`` is over on kubelet's connection: the observer hears of it at the flush."""
        if self.observer is not None:
            self._finished.append(stream)

    def _report(self) -> None:
        finished, self._finished = self._finished, []
        observer = self.observer
        assert observer is not None
        now = time.monotonic()
        for stream in finished:
            status = stream.status
            # No status sent: the stream was reset (by either side) or its connection was lost.
            code = status if status >= 0 else CANCELLED
            try:
                observer(stream.method, code, now - stream.started)
            except Exception:
                log.exception("call observer failed for %s", stream.method)

    def spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    @property
    def connections(self) -> int:
        return len(self.conns)

    @property
    def listening(self) -> bool:
        return self._server is not None

    @property
    def socket_inode(self) -> int:
        """The inode of the socket this server bound (-1 before it did)."""
        return self._socket_inode

    async def close(self, grace: float = 5.0) -> None:
        """Stop accepting, GOAWAY every connection, let calls finish for ``grace`` s, close."""
        if self._server is not None:
            self._server.close()
            self._server = None
            with contextlib.suppress(FileNotFoundError):
                # Only our own socket file: a successor may already listen on the same path.
                if os.stat(self.socket_path).st_ino == self._socket_inode:
                    os.unlink(self.socket_path)
        for conn in list(self.conns):
            conn.drain()
        self.flush()
        deadline = time.monotonic() + grace
        while self.conns and any(c.streams for c in self.conns):
            if time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.01)
        for conn in list(self.conns):
            conn.abort("relay shutting down")
        self.flush()
        if self._tasks:
            # Interceptors and on_response hooks (which now see the failure) get a moment to
            # finish their bookkeeping; whatever is still running after that is cancelled.
            left = max(deadline - time.monotonic(), 0.5)
            await asyncio.wait(list(self._tasks), timeout=left)
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=1.0)
        await asyncio.sleep(0)  # let connection_lost callbacks run
        if self._late_timer is not None:
            self._late_timer.cancel()
            self._late_timer = None
        self._closed.set()

    async def wait_closed(self) -> None:
        await self._closed.wait()

    async def __aenter__(self) -> RelayServer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


def _remove_stale_socket(path: str) -> None:
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    # A symbolic link is the fallback an enforcer leaves while none runs (enforcer.handover).
    if not (stat.S_ISSOCK(mode) or stat.S_ISLNK(mode)):
        raise FileExistsError(f"{path} exists and is not a socket")
    os.unlink(path)


async def serve_relay(
    relay_socket: str,
    route: Route,
    intercepts: Mapping[str, Interceptor],
    *,
    ready: asyncio.Event | None = None,
    observer: Observer | None = None,
    taps: Mapping[str, TapFactory] | None = None,
) -> RelayServer:
    """Start a relay on ``relay_socket``; returns the running server (``await .close()``).

    ``observer``, when given, is told about every call once it has finished (see Observer);
    ``taps`` watch the calls of their methods without holding them up (see Tap).
    """
    server = RelayServer(relay_socket, route, intercepts, observer, taps)
    await server.start()
    if ready is not None:
        ready.set()
    return server
