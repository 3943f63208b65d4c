"""The HTTP server of /metrics and /healthz: one thread, bounded connections, GET and HEAD only.

It runs its own event loop on one thread of its own (never the relay's loop: rendering the
metrics takes milliseconds), so a thousand connections cost no threads. Each connection
carries one request (HTTP/1.0 style, `Connection: close`), whose head must arrive within
`READ_SECONDS` and fit in `MAX_HEAD_BYTES`; at most `MAX_CONNECTIONS` are open at once, and
one more is closed on accept. Other methods get 405, other paths 404.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from enforcer.metrics import EnforcerMetrics

READ_SECONDS = 5.0
MAX_HEAD_BYTES = 8 * 1024
MAX_CONNECTIONS = 64

# None: healthy; else why not, for the 503's body.
Health = Callable[[], str | None]

_REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}


def _listen(address: str) -> socket.socket:
    """The listening socket for HOST:PORT (`[::1]:PORT` for IPv6; an empty host: every
    IPv4 address). Raises OSError (EADDRINUSE while another enforcer holds the port)."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]") or "0.0.0.0"
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, int(port)), family=family, backlog=64)


class MetricsServer:
    """GET/HEAD /metrics and /healthz on `address`, served from a thread of its own."""

    def __init__(
        self, address: str, metrics: EnforcerMetrics, health: Health = lambda: None
    ) -> None:
        self.registry = metrics.registry
        self.health = health
        self.sock = _listen(address)
        self.open_connections = 0
        self.refused = 0
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name="metrics")
        self._started = threading.Event()

    @property
    def port(self) -> int:
        port: int = self.sock.getsockname()[1]
        return port

    def start(self) -> MetricsServer:
        self._thread.start()
        self._started.wait(10)
        return self

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._serve, sock=self.sock, limit=MAX_HEAD_BYTES)
        )
        self._started.set()
        try:
            self._loop.run_forever()
        finally:
            self._server.close()
            self._loop.run_until_complete(self._server.wait_closed())
            self._loop.close()

    def close(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        else:
            self.sock.close()

    # -- one connection, one request ----------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.open_connections >= MAX_CONNECTIONS:
            self.refused += 1
            writer.transport.abort()
            return
        self.open_connections += 1
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_SECONDS)
            answer = self._answer(head)
            if answer is not None:
                writer.write(answer)
            writer.close()  # after what was written is sent
            await asyncio.wait_for(writer.wait_closed(), READ_SECONDS)
        except (
            TimeoutError,
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            ConnectionError,
        ):
            writer.transport.abort()  # a peer that stalls, sends too much or leaves: cut off
        finally:
            self.open_connections -= 1

    def _answer(self, head: bytes) -> bytes | None:
        request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = request_line.split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return None  # not HTTP: close without a word
        method, target = parts[0], parts[1]
        path = target.split("?", 1)[0]
        extra = b""
        if method not in ("GET", "HEAD"):
            status, ctype, body = 405, "text/plain", b"method not allowed\n"
            extra = b"Allow: GET, HEAD\r\n"
        elif path == "/metrics":
            status, ctype, body = 200, CONTENT_TYPE_LATEST, generate_latest(self.registry)
        elif path == "/healthz":
            why = self.health()
            if why is None:
                status, ctype, body = 200, "text/plain", b"ok\n"
            else:
                status, ctype, body = 503, "text/plain", f"not ready: {why}\n".encode()
        else:
            status, ctype, body = 404, "text/plain", b"not found\n"
        header = (
            f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: {ctype}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n"
        ).encode() + extra
        return header + b"\r\n" + (b"" if method == "HEAD" else body)
