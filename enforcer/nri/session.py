"""The plugin's life on the runtime's NRI socket: connect, register, serve until the runtime
goes, then connect again with backoff, until stopped.

Registration (RegisterPlugin with the plugin's name and two-digit index) must complete within
the runtime's registration timeout (containerd: 5 s); the runtime may send Configure before
it answers, which the connection serves meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping

from enforcer.nri.connection import (
    ConnectionClosed,
    Handler,
    NriConnection,
    TtrpcError,
    open_connection,
)
from enforcer.nriapi import api_pb2

log = logging.getLogger(__name__)

API = "nri.pkg.api.v1alpha1"
PLUGIN_SERVICE = f"{API}.Plugin"
RUNTIME_SERVICE = f"{API}.Runtime"
REGISTER_TIMEOUT = 5.0
FIRST_BACKOFF = 0.2
MAX_BACKOFF = 5.0


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
    ) -> None:
        self.socket_path = socket_path
        self.name = name
        self.index = index
        self.handlers = dict(handlers)
        self.on_connect = on_connect
        self.on_disconnect = on_disconnect
        self.connection: NriConnection | None = None
        self.registered = asyncio.Event()
        self.connects = 0  # registrations so far

    async def register(self) -> NriConnection:
        connection = await open_connection(self.socket_path, self.handlers)
        request = api_pb2.RegisterPluginRequest(plugin_name=self.name, plugin_idx=self.index)
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
            backoff = FIRST_BACKOFF
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
            stopped = asyncio.create_task(stop.wait())
            closed = asyncio.create_task(connection.wait_closed())
            await asyncio.wait([stopped, closed], return_when=asyncio.FIRST_COMPLETED)
            stopped.cancel()
            closed.cancel()
            reason = connection.close_reason if connection.closed.is_set() else "stopping"
            connection.close("the plugin is stopping")
            self.registered.clear()
            self.connection = None
            if self.on_disconnect is not None:
                await self.on_disconnect(reason)
            if not stop.is_set():
                log.warning("NRI connection lost (%s); reconnecting", reason)
