"""The plugin's life on the runtime's NRI socket: connect, register, serve until the runtime
goes, then connect again with backoff, until stopped.

Registration (RegisterPlugin with the plugin's name and two-digit index) must complete within
the runtime's registration timeout (containerd: 5 s); the runtime may send Configure before
it answers, which the connection serves meanwhile.

A registered plugin is not yet one the runtime calls: the runtime takes it in only once its
Synchronize was answered. When that exchange fails, containerd 1.7 logs "failed to
synchronize plugin" and keeps the connection open without ever sending another event: the
plugin is left out for good while it looks connected. So a connection that is not
synchronized within `SYNC_SECONDS` of registering is closed and the plugin registers again
(a vital request that failed closes it at once, `NriConnection`), with a backoff that only
a synchronized connection resets.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping

from enforcer.nri.connection import (
    LEFT_OUT,
    ConnectionClosed,
    Handler,
    NriConnection,
    TtrpcError,
    open_connection,
)
from enforcer.nri.protocol import PLUGIN_NRI_VERSION
from enforcer.nriapi import api_pb2

log = logging.getLogger(__name__)

API = "nri.pkg.api.v1alpha1"
PLUGIN_SERVICE = f"{API}.Plugin"
RUNTIME_SERVICE = f"{API}.Runtime"
REGISTER_TIMEOUT = 5.0
# After RegisterPlugin's answer containerd sends Configure (2 s to answer), then, once its NRI
# lock is free (each event holds it up to 2 s per plugin), Synchronize.
SYNC_SECONDS = 10.0
FIRST_BACKOFF = 0.2
MAX_BACKOFF = 5.0
# The runtime leaves a plugin out when one of these fails.
VITAL = ("Configure", "Synchronize")


def plugin_method(name: str) -> str:
    return f"{PLUGIN_SERVICE}/{name}"


class Session:
    """Keeps the plugin registered with the runtime. ``on_connect`` runs once a connection is
    registered, ``on_disconnect`` with the reason once it is gone."""

    def __init__(
        self,
        socket_path: str,
        name: str,
        index: str,
        handlers: Mapping[str, Handler],
        *,
        on_connect: Callable[[NriConnection], Awaitable[None]] | None = None,
        on_disconnect: Callable[[str], Awaitable[None]] | None = None,
        sync_seconds: float = SYNC_SECONDS,
    ) -> None:
        self.socket_path = socket_path
        self.name = name
        self.index = index
        self.handlers = dict(handlers)
        sync = plugin_method("Synchronize")
        if sync in self.handlers:
            self.handlers[sync] = self._synchronizing(self.handlers[sync])
        self.on_connect = on_connect
        self.on_disconnect = on_disconnect
        # Set once the current connection's Synchronize was answered OK.
        self.synchronized = asyncio.Event()
        self.sync_seconds = sync_seconds
        self.connection: NriConnection | None = None
        self.registered = asyncio.Event()
        self.connects = 0  # registrations so far
        self.left_out = 0  # connections closed because the runtime did not synchronize them

    def _synchronizing(self, handler: Handler) -> Handler:
        async def synchronize(payload: bytes) -> bytes:
            reply = await handler(payload)
            # A part of a split Synchronize (answered with more) does not synchronize yet.
            if not api_pb2.SynchronizeResponse.FromString(reply).more:
                self.synchronized.set()
            return reply

        return synchronize

    async def register(self) -> NriConnection:
        vital = [plugin_method(m) for m in VITAL]
        connection = await open_connection(self.socket_path, self.handlers, vital)
        request = api_pb2.RegisterPluginRequest(
            plugin_name=self.name, plugin_idx=self.index, NRI_version=PLUGIN_NRI_VERSION
        )
        try:
            await connection.call(
                RUNTIME_SERVICE,
                "RegisterPlugin",
                request.SerializeToString(),
                timeout=REGISTER_TIMEOUT,
            )
        except BaseException:
            connection.close("registration failed")
            raise
        return connection

    async def run(self, stop: asyncio.Event) -> None:
        backoff = FIRST_BACKOFF
        while not stop.is_set():
            self.synchronized.clear()
            try:
                connection = await self.register()
            except (OSError, TtrpcError, ConnectionClosed) as exc:
                log.warning(
                    "cannot register with the runtime at %s (%s); retrying in %.1fs",
                    self.socket_path,
                    exc,
                    backoff,
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)
                continue
            self.connection = connection
            self.connects += 1
            self.registered.set()
            log.info(
                "registered with the runtime at %s as plugin %s-%s",
                self.socket_path,
                self.index,
                self.name,
            )
            if self.on_connect is not None:
                await self.on_connect(connection)
            synchronized = await self._serve(connection, stop)
            reason = connection.close_reason if connection.closed.is_set() else "stopping"
            connection.close("the plugin is stopping")
            self.registered.clear()
            self.connection = None
            if self.on_disconnect is not None:
                await self.on_disconnect(reason)
            self.synchronized.clear()
            if stop.is_set():
                break
            if synchronized:
                backoff = FIRST_BACKOFF
                log.warning("NRI connection lost (%s); reconnecting", reason)
                continue
            # Never taken in by the runtime: registering again at once could repeat it in a
            # tight loop, so the backoff grows (bounded) until a connection is synchronized.
            log.warning(
                "NRI connection ended before the runtime synchronized the plugin (%s); "
                "registering again in %.1fs",
                reason,
                backoff,
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), backoff)
            backoff = min(backoff * 2, MAX_BACKOFF)

    async def _serve(self, connection: NriConnection, stop: asyncio.Event) -> bool:
        """Until the connection closes or the plugin stops; a connection that the runtime
        does not synchronize within `sync_seconds` is closed. True when it was synchronized."""
        stopped = asyncio.create_task(stop.wait())
        closed = asyncio.create_task(connection.wait_closed())
        synced = asyncio.create_task(self.synchronized.wait())
        try:
            done, _ = await asyncio.wait(
                [stopped, closed, synced],
                timeout=self.sync_seconds,
                return_when=asyncio.FIRST_COMPLETED,
            )
            if not done:
                self.left_out += 1
                log.error(
                    "the runtime has not synchronized plugin %s-%s within %gs of its "
                    "registration: it left the plugin out (its log says why); closing the "
                    "connection to register again",
                    self.index,
                    self.name,
                    self.sync_seconds,
                )
                connection.close(f"{LEFT_OUT}: no Synchronize within {self.sync_seconds:g}s")
                return False
            if synced in done:
                await asyncio.wait([stopped, closed], return_when=asyncio.FIRST_COMPLETED)
            # Answered, but closed as left out (its answer did not reach the runtime): not
            # synchronized, so the backoff grows.
            return self.synchronized.is_set() and not connection.close_reason.startswith(LEFT_OUT)
        finally:
            for task in (stopped, closed, synced):
                task.cancel()
