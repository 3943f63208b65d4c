"""A do-nothing byte pipe on uvloop: the floor under any relay written in Python.

    python -m bench.pipe --listen SOCKET --backend SOCKET

Each accepted unix-socket connection gets its own connection to the backend, and bytes are
copied both ways as they come, nothing parsed, on the same event loop the relay runs on. What
it costs over a direct call is the two extra hops through a process (a wake-up, a read and a
write each way), which every relay pays before it does any work. `python -m bench relay`
measures it beside the relay, with the Go client (bench/README.md, "The floor").

Backpressure as a relay needs it: a side whose peer's write buffer is over its high-water mark
stops being read until it drains, so neither direction buffers more than that.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Sequence
from typing import Any

import uvloop

HIGH_WATER = 256 * 1024


class _Side(asyncio.Protocol):
    """One end of a pipe: what it reads is written to its peer."""

    def __init__(self) -> None:
        self.transport: Any = None
        self.peer: _Side | None = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        transport.set_write_buffer_limits(high=HIGH_WATER)

    def data_received(self, data: bytes) -> None:
        peer = self.peer
        if peer is not None and not peer.transport.is_closing():
            peer.transport.write(data)

    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()


class _Client(_Side):
    """The accepted end: what it sends before its backend connection is made is kept (its
    reading paused past HIGH_WATER), then written first."""

    def __init__(self, backend: str) -> None:
        super().__init__()
        self.backend = backend
        self.early: list[bytes] = []
        self.early_bytes = 0

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        asyncio.get_running_loop().create_task(self._connect())

    def data_received(self, data: bytes) -> None:
        if self.peer is not None:
            super().data_received(data)
            return
        self.early.append(data)
        self.early_bytes += len(data)
        if self.early_bytes > HIGH_WATER:
            self.transport.pause_reading()

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            _, upstream = await loop.create_unix_connection(_Side, self.backend)
        except OSError:
            self.transport.close()
            return
        if self.transport.is_closing():
            upstream.transport.close()
            return
        upstream.peer, self.peer = self, upstream
        upstream.transport.writelines(self.early)
        self.early.clear()
        if self.early_bytes > HIGH_WATER:
            self.transport.resume_reading()


async def _serve(listen: str, backend: str) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_unix_server(lambda: _Client(backend), listen)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    server.close()


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pipe", description=__doc__)
    parser.add_argument("--listen", required=True, help="unix socket to serve")
    parser.add_argument("--backend", required=True, help="unix socket of the runtime")
    args = parser.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        uvloop.run(_serve(args.listen, args.backend))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
