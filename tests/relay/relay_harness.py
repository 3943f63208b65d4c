"""Test doubles for the relay tests: a fake gRPC upstream and a relay on a loop thread.

The fake upstream is a real grpcio server with a generic handler, so it serves any method
path; what it does is chosen by the path's last segment (``Echo``, ``Fail``, ``Slow``,
``ServerStream``, ``ClientStream``, ``Bidi``; ``Nothing`` is unimplemented; anything else
echoes). Clients are real grpcio channels with raw-bytes methods.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc

from enforcer.relay.h2 import Interceptor, RelayServer, TapFactory, serve_relay

BIG = 64 << 20
GRPC_OPTIONS = [
    ("grpc.max_receive_message_length", BIG),
    ("grpc.max_send_message_length", BIG),
    ("grpc.max_metadata_size", 1 << 20),
]
ECHO = "/test.Svc/Echo"


def unary(channel: grpc.Channel, path: str = ECHO) -> grpc.UnaryUnaryMultiCallable:
    """A raw-bytes unary method of `channel`."""
    return channel.unary_unary(path)


@dataclass
class Record:
    method: str
    metadata: dict[str, Any]
    requests: list[bytes] = field(default_factory=list)
    time_remaining: float | None = None
    cancelled: threading.Event = field(default_factory=threading.Event)
    started: threading.Event = field(default_factory=threading.Event)


class FakeUpstream:
    """A grpcio server on a unix socket that records every call it handles."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.records: list[Record] = []
        self._lock = threading.Lock()
        self.server: grpc.Server | None = None

    def start(self) -> FakeUpstream:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=64), options=GRPC_OPTIONS)
        server.add_generic_rpc_handlers([_Handler(self)])
        server.add_insecure_port(f"unix:{self.path}")
        server.start()
        self.server = server
        return self

    def stop(self, grace: float | None = 0) -> None:
        if self.server is not None:
            self.server.stop(grace).wait(5)
            self.server = None

    def record(self, method: str, context: grpc.ServicerContext) -> Record:
        metadata = {k: v for k, v in context.invocation_metadata()}
        rec = Record(method, metadata, time_remaining=context.time_remaining())
        context.add_callback(rec.cancelled.set)
        with self._lock:
            self.records.append(rec)
        return rec

    def methods(self) -> list[str]:
        with self._lock:
            return [r.method for r in self.records]


def _echo_metadata(context: grpc.ServicerContext) -> None:
    """Echo x-* request metadata back as initial metadata; fixed trailers incl. binary."""
    initial = [(f"echo-{k}", v) for k, v in context.invocation_metadata() if k.startswith("x-")]
    context.send_initial_metadata(initial)
    context.set_trailing_metadata([("trailer-x", "t"), ("trailer-bin", b"\x00\x01\xfe\xff")])


class _Handler(grpc.GenericRpcHandler):
    def __init__(self, upstream: FakeUpstream) -> None:
        self.up = upstream

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        method = details.method
        kind = method.rsplit("/", 1)[-1]
        up = self.up

        def unary(request: bytes, context: grpc.ServicerContext) -> bytes:
            rec = up.record(method, context)
            rec.requests.append(request)
            rec.started.set()
            if kind == "Fail":
                context.abort(grpc.StatusCode.NOT_FOUND, request.decode("utf-8"))
            if kind == "Slow":
                deadline = time.monotonic() + float(request.decode())
                while time.monotonic() < deadline and context.is_active():
                    time.sleep(0.01)
                return b"slept"
            _echo_metadata(context)
            return request

        def server_stream(request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
            rec = up.record(method, context)
            rec.requests.append(request)
            _echo_metadata(context)
            for i in range(int(request.decode())):
                yield b"msg-%d" % i

        def client_stream(requests: Iterator[bytes], context: grpc.ServicerContext) -> bytes:
            rec = up.record(method, context)
            for r in requests:
                rec.requests.append(r)
            _echo_metadata(context)
            return b"|".join(rec.requests)

        def bidi(requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
            rec = up.record(method, context)
            _echo_metadata(context)
            for r in requests:
                rec.requests.append(r)
                yield r.upper()

        if kind == "Nothing":
            return None
        if kind == "ServerStream":
            return grpc.unary_stream_rpc_method_handler(server_stream)
        if kind == "ClientStream":
            return grpc.stream_unary_rpc_method_handler(client_stream)
        if kind == "Bidi":
            return grpc.stream_stream_rpc_method_handler(bidi)
        return grpc.unary_unary_rpc_method_handler(unary)


class RelayThread:
    """A relay serving on its own event loop in a background thread."""

    def __init__(
        self,
        socket_path: str,
        route: Callable[[str], str],
        intercepts: Mapping[str, Interceptor] | None = None,
        taps: Mapping[str, TapFactory] | None = None,
    ) -> None:
        self.socket_path = socket_path
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server: RelayServer = self.run(
            serve_relay(socket_path, route, intercepts or {}, taps=taps)
        )
        self._closed = False

    def run(self, coro: Any, timeout: float = 10.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def wait_idle(self, timeout: float = 5.0) -> bool:
        """Wait until no downstream connection has a stream open (checked on the loop)."""

        async def idle() -> bool:
            return not any(c.streams for c in self.server.conns)

        deadline = time.monotonic() + timeout
        while not self.run(idle()):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    def close(self, grace: float = 0.5) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self.run(self.server.close(grace), timeout=grace + 10)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)
            self.loop.close()
