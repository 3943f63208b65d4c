"""Each NRI request counted for the metrics: its method, status code, answer time and event."""

from __future__ import annotations

import time
from collections.abc import Callable

from enforcer.nri.connection import OK, UNKNOWN, Handler, TtrpcError

# (method, ttrpc status code, seconds, StateChange event name): the metrics' observer.
Observer = Callable[[str, int, float, str], None]


def no_observer(method: str, code: int, seconds: float, event: str) -> None:
    pass


def counted(
    observe: Observer,
    method: str,
    fn: Handler,
    event: Callable[[bytes], str] | None = None,
) -> Handler:
    """``fn``, with each request given to ``observe`` with its status code and answer time."""

    async def handle(payload: bytes) -> bytes:
        start = time.perf_counter()
        code = UNKNOWN
        try:
            reply = await fn(payload)
            code = OK
            return reply
        except TtrpcError as exc:
            code = exc.code
            raise
        finally:
            name = event(payload) if event is not None else ""
            observe(method, code, time.perf_counter() - start, name)

    return handle
