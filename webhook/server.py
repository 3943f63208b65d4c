"""Runs an ASGI app on uvicorn (uvloop, httptools) over the reloading TLS context.

Shared by `serve` and the benchmark's bare app, so both are measured over the very same TLS
and HTTP setup, with the same bounds on connections and on the time to send a request
(`webhook.guard`)."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import socket
from typing import Any

import uvicorn

from webhook.guard import (
    MAX_CONNECTIONS,
    ConnectionGate,
    RequestDeadline,
    shrink_tls_read_buffer,
)
from webhook.tls import ReloadingTLS

log = logging.getLogger("webhook.server")

# Longer than the API server's idle-connection timeout (90 s): the client, not us, closes
# idle keep-alive connections, so it never reuses one we are closing at the same moment.
KEEP_ALIVE_SECONDS = 120
GRACEFUL_SHUTDOWN_SECONDS = 10


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound before serving so port 0 can be used and reported."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP spelled out: asyncio sets TCP_NODELAY only on sockets that say they are TCP,
    # and without it every response waits ~40 ms for the client's delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(1024)
    return sock


class _Server(uvicorn.Server):
    """uvicorn, behind a connection gate, with TLS handshake and shutdown timeouts, and with a
    shutdown that does not wait on idle TLS connections.

    Closing a TLS connection waits for the peer's close_notify (asyncio gives it 30 s); a
    client idling on a keep-alive connection never sends it, so each would hold shutdown up
    until uvicorn's graceful timeout. Connections with no request in flight and nothing left
    to send are cut instead; requests in flight finish first.
    """

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        # uvicorn makes the listening server itself, with the loop's defaults (60 s for a TLS
        # handshake, no limit on connections): its call is given the gate, which makes the
        # TLS handshake with our timeouts.
        loop = asyncio.get_running_loop()
        self.gate = ConnectionGate(self.server_state.connections)
        create_server = loop.create_server

        async def guarded(factory: Any, *args: Any, **kwargs: Any) -> Any:
            tls, sock = kwargs.get("ssl"), kwargs.get("sock")
            if tls is not None and sock is not None and not args:
                return await self.gate.listen(sock, factory, tls)
            return await create_server(self.gate.wrap(factory), *args, **kwargs)

        loop.create_server = guarded  # type: ignore[method-assign, assignment]
        try:
            await super().startup(sockets)
        finally:
            del loop.create_server  # the loop's own method again

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in getattr(self, "servers", []):
            server.close()  # stop accepting before anything else
        done = asyncio.Event()

        async def reap() -> None:
            while not done.is_set():
                for connection in list(self.server_state.connections):
                    cycle = getattr(connection, "cycle", None)
                    transport = getattr(connection, "transport", None)
                    idle = cycle is None or cycle.response_complete
                    if idle and transport is not None and not transport.get_write_buffer_size():
                        transport.abort()
                await asyncio.sleep(0.05)

        reaper = asyncio.create_task(reap())
        try:
            await super().shutdown(sockets)
        finally:
            done.set()
            await reaper


def _exit_quietly(signum: int, frame: Any) -> None:
    raise SystemExit(0)


def run(app: Any, sock: socket.socket, tls: ReloadingTLS, *, log_level: str = "info") -> None:
    """Serves until SIGTERM or SIGINT; then stops accepting, finishes the requests in flight
    and returns (uvicorn re-raises the signal after its shutdown; it lands in the handler
    below, so the process exits 0 rather than dying of the signal)."""
    config = uvicorn.Config(
        app,
        ssl_context_factory=lambda _config, _default: tls.context,
        log_config=None,
        log_level=log_level,
        access_log=False,
        lifespan="on",
        ws="none",
        server_header=False,
        # The API server calls the webhook directly: no proxy's X-Forwarded-* to trust.
        proxy_headers=False,
        # uvloop's event loop and httptools' parser (the fastest pair uvicorn runs on), with
        # the deadline and head bound of `webhook.guard` on top.
        loop="uvloop",
        http=RequestDeadline,
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
        # Requests in flight and connections, as the gate counts them: the next request is
        # answered 503 (the gate refuses the next connection before that).
        limit_concurrency=MAX_CONNECTIONS,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
    )
    shrink_tls_read_buffer()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _exit_quietly)
    # Everything loaded so far lives as long as the process: keep it out of the garbage
    # collector's sweeps, which would otherwise walk every module object over and over.
    gc.collect()
    gc.freeze()
    host, port = sock.getsockname()[:2]
    log.info("serving", extra={"fields": {"address": f"{host}:{port}", "port": port}})
    try:
        _Server(config).run(sockets=[sock])
    except SystemExit as exc:
        if exc.code not in (0, None):
            raise
    log.info("stopped")
