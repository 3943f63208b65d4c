"""One connection to the runtime's NRI socket: the multiplexer, the plugin service served on
connection 1 (we are the ttrpc server) and calls to the runtime service on connection 2 (we
are the ttrpc client), over asyncio.

Handlers take a request's payload and return the response's payload, or raise `TtrpcError`
for an error status. A method without a handler is answered UNIMPLEMENTED, as ttrpc does, so
a newer runtime's extra events cannot break the plugin. Every buffer is bounded: a frame by
the multiplexer's limit, a request of the runtime by the most the runtime can send
(`MAX_REQUEST`), a response to our calls by ttrpc's limit, the requests in flight by count
and by bytes.

Some requests are vital: when the plugin cannot answer one (the runtime's Configure or
Synchronize), the runtime leaves the plugin out for good while it keeps the connection open
(containerd 1.7 logs "failed to synchronize plugin" and sends nothing more). The connection
then closes itself, so the session registers again.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Awaitable, Callable, Collection, Mapping
from functools import partial

from enforcer.nri.frames import (
    MAX_MESSAGE,
    MAX_REQUEST,
    PLUGIN_CONN,
    REQUEST,
    RESPONSE,
    RUNTIME_CONN,
    Message,
    MuxReader,
    ProtocolError,
    TtrpcReader,
    mux_frames,
    ttrpc_message,
)
from enforcer.nriapi import request_pb2

log = logging.getLogger(__name__)

Handler = Callable[[bytes], Awaitable[bytes]]

# gRPC status codes, as ttrpc carries them.
OK = 0
UNKNOWN = 2
DEADLINE_EXCEEDED = 4
RESOURCE_EXHAUSTED = 8
UNIMPLEMENTED = 12
UNAVAILABLE = 14
READ_SIZE = 64 * 1024
MAX_IN_FLIGHT = 64  # requests of the runtime being handled at once
MAX_IN_FLIGHT_BYTES = 2 * MAX_REQUEST  # and their bodies together
LEFT_OUT = "left out by the runtime"  # how a connection closed for that says why


class TtrpcError(Exception):
    """An error status: from a handler (sent to the runtime) or from the runtime (raised)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class ConnectionClosed(Exception):
    """The runtime closed the connection (or it broke) before a call was answered."""


class NriConnection:
    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        handlers: Mapping[str, Handler],
        *,
        max_request: int = MAX_REQUEST,
        vital: Collection[str] = (),
    ) -> None:
        self._reader = reader
        self._writer = writer
        self.handlers = dict(handlers)  # "service/method" -> handler
        # Methods the runtime leaves the plugin out after a failed answer to; once each was
        # answered OK, an oversized request is only refused, not a reason to go.
        self.vital = frozenset(vital)
        self._vital_done: set[str] = set()
        self._mux = MuxReader()
        self._streams = {
            PLUGIN_CONN: TtrpcReader(max_request),
            RUNTIME_CONN: TtrpcReader(MAX_MESSAGE),
        }
        self._in_flight_bytes = 0
        self._ids = itertools.count(1, 2)  # a client's stream ids are odd
        self._calls: dict[int, asyncio.Future[request_pb2.Response]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._reading: asyncio.Task[None] | None = None
        self.closed = asyncio.Event()
        self.close_reason = ""

    def start(self) -> None:
        self._reading = asyncio.create_task(self._read_loop())

    async def wait_closed(self) -> str:
        await self.closed.wait()
        return self.close_reason

    def close(self, reason: str = "closed by the plugin") -> None:
        if self.closed.is_set():
            return
        self.close_reason = reason
        self.closed.set()
        for future in self._calls.values():
            if not future.done():
                future.set_exception(ConnectionClosed(reason))
        self._calls.clear()
        with contextlib.suppress(Exception):
            self._writer.close()
        if self._reading is not None and self._reading is not asyncio.current_task():
            self._reading.cancel()

    # -- reading -------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        reason = "the runtime closed the connection"
        try:
            while True:
                data = await self._reader.read(READ_SIZE)
                if not data:
                    break
                for conn, payload in self._mux.feed(data):
                    stream = self._streams.get(conn)
                    if stream is None:
                        continue  # a connection we never opened: dropped, as the runtime does
                    for message in stream.feed(payload):
                        self._dispatch(conn, message)
        except ProtocolError as exc:
            reason = f"protocol error: {exc}"
            log.error("NRI connection: %s", reason)
        except (ConnectionError, OSError) as exc:
            reason = f"connection lost: {exc}"
        except asyncio.CancelledError:
            reason = self.close_reason or "cancelled"
        finally:
            self.close(reason)

    def _dispatch(self, conn: int, message: Message) -> None:
        if conn == RUNTIME_CONN and message.kind == RESPONSE:
            future = self._calls.pop(message.stream_id, None)
            if future is None or future.done():
                return
            if message.body is None:
                future.set_exception(
                    TtrpcError(RESOURCE_EXHAUSTED, f"response of {message.length} bytes")
                )
                return
            try:
                future.set_result(request_pb2.Response.FromString(message.body))
            except Exception as exc:  # a DecodeError: the runtime sent garbage
                future.set_exception(TtrpcError(UNKNOWN, f"cannot parse the response: {exc}"))
            return
        if conn == PLUGIN_CONN and message.kind == REQUEST:
            if message.body is None:
                refusal = (
                    f"message length {message.length} exceeds the maximum of "
                    f"{self._streams[PLUGIN_CONN].max_message}"
                )
                self._respond_error(message.stream_id, RESOURCE_EXHAUSTED, refusal)
                if self._vital_done != self.vital:
                    # Likely the Synchronize: unanswered, the runtime would leave us out.
                    self._left_out(f"a request refused before the runtime synchronized: {refusal}")
                return
            size = len(message.body)
            if (
                len(self._tasks) >= MAX_IN_FLIGHT
                or self._in_flight_bytes + size > MAX_IN_FLIGHT_BYTES
            ):
                self._respond_error(
                    message.stream_id, RESOURCE_EXHAUSTED, "too many requests in flight"
                )
                return
            self._in_flight_bytes += size
            task = asyncio.create_task(self._serve(message.stream_id, message.body))
            self._tasks.add(task)
            task.add_done_callback(partial(self._served, size))
        # Anything else (a request on the client connection, a stream's data): not ours.

    def _served(self, size: int, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._in_flight_bytes -= size

    def _left_out(self, why: str) -> None:
        """The runtime will send this connection nothing more: closed (after the answers
        already written), so that the plugin registers again."""
        reason = f"{LEFT_OUT}: {why}"
        log.error("NRI connection: %s; closing it to register again", reason)

        async def close_after_drain() -> None:
            await self.drain()
            self.close(reason)

        task = asyncio.create_task(close_after_drain())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, stream_id: int, body: bytes) -> None:
        try:
            request = request_pb2.Request.FromString(body)
        except Exception as exc:
            self._respond_error(stream_id, UNKNOWN, f"cannot parse the request: {exc}")
            return
        del body  # the payload is all that is kept
        name = f"{request.service}/{request.method}"
        handler = self.handlers.get(name)
        if handler is None:
            self._respond_error(stream_id, UNIMPLEMENTED, f"{name} is not implemented")
            return
        try:
            payload = await handler(request.payload)
        except TtrpcError as exc:
            self._respond_error(stream_id, exc.code, exc.message)
            self._failed(name, f"{exc.code}: {exc.message}")
            return
        except Exception as exc:
            log.exception("NRI %s failed", name)
            self._respond_error(stream_id, UNKNOWN, f"{name}: {exc}")
            self._failed(name, str(exc))
            return
        if not self._respond(stream_id, request_pb2.Response(payload=payload)):
            self._failed(name, "its answer was over the runtime's 4 MiB")
        elif name in self.vital:
            self._vital_done.add(name)
        await self.drain()

    def _failed(self, name: str, why: str) -> None:
        if name in self.vital:
            self._left_out(f"{name.rsplit('/', 1)[-1]} failed ({why})")

    # -- writing -------------------------------------------------------------------------

    def _send(self, conn: int, message: bytes) -> None:
        if self.closed.is_set():
            return
        # One write of every frame of the message: no other message interleaves.
        self._writer.write(mux_frames(conn, message))

    def _respond(self, stream_id: int, response: request_pb2.Response) -> bool:
        """Sends the response; False when it was over what the runtime reads and an error
        status went instead."""
        body = response.SerializeToString()
        fits = len(body) <= MAX_MESSAGE
        if not fits:
            response = request_pb2.Response(
                status=request_pb2.Status(
                    code=RESOURCE_EXHAUSTED, message=f"response of {len(body)} bytes too large"
                )
            )
            body = response.SerializeToString()
        self._send(PLUGIN_CONN, ttrpc_message(stream_id, RESPONSE, body))
        return fits

    def _respond_error(self, stream_id: int, code: int, message: str) -> None:
        self._respond(
            stream_id, request_pb2.Response(status=request_pb2.Status(code=code, message=message))
        )

    async def drain(self) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            await self._writer.drain()

    async def call(self, service: str, method: str, payload: bytes, timeout: float) -> bytes:
        """Calls the runtime; returns the response's payload. TtrpcError for an error status
        (DEADLINE_EXCEEDED when it does not answer in time), ConnectionClosed when the
        connection goes."""
        if self.closed.is_set():
            raise ConnectionClosed(self.close_reason)
        stream_id = next(self._ids)
        request = request_pb2.Request(
            service=service, method=method, payload=payload, timeout_nano=int(timeout * 1e9)
        )
        future: asyncio.Future[request_pb2.Response] = asyncio.get_running_loop().create_future()
        self._calls[stream_id] = future
        self._send(RUNTIME_CONN, ttrpc_message(stream_id, REQUEST, request.SerializeToString()))
        await self.drain()
        try:
            response = await asyncio.wait_for(future, timeout)
        except TimeoutError:
            raise TtrpcError(
                DEADLINE_EXCEEDED, f"{service}/{method}: no answer in {timeout:g}s"
            ) from None
        finally:
            self._calls.pop(stream_id, None)
        if response.HasField("status") and response.status.code != OK:
            raise TtrpcError(response.status.code, response.status.message)
        return response.payload


async def open_connection(
    path: str, handlers: Mapping[str, Handler], vital: Collection[str] = ()
) -> NriConnection:
    reader, writer = await asyncio.open_unix_connection(path, limit=READ_SIZE)
    connection = NriConnection(reader, writer, handlers, vital=vital)
    connection.start()
    return connection
