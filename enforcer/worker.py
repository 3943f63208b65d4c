"""The engine's one worker thread, shared by the transports (the CRI relay, the NRI plugin).

The engine's work (policy decisions, state writes, re-pins through the runtime) is ordered and
blocking: it runs here, one call at a time, while the transport's event loop goes on serving.
Also the periodic maintenance and the coalesced state write after a burst of changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from enforcer.engine import Enforcer

log = logging.getLogger(__name__)

T = TypeVar("T")
FLUSH_DELAY_SECONDS = 0.2
MAINTAIN_SECONDS = 5.0


class EngineWorker:
    def __init__(self, enforcer: Enforcer) -> None:
        self.enforcer = enforcer
        # Its thread holds the engine: a call that changes it from another thread fails
        # (enforcer.engine.thread).
        self._worker = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="enforcer", initializer=enforcer.worker_thread.bind
        )
        self._flush_pending = False

    def close(self) -> None:
        self._worker.shutdown(wait=True)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Runs fn on the worker and waits for it."""
        return await asyncio.get_running_loop().run_in_executor(self._worker, fn, *args)

    def start_soon(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """Queues fn on the worker once the event loop's current step is over (what the step
        prepared, a forwarded call, is sent first); a `run` or `submit` made in the same step
        may go before it (the worker runs jobs in the order they reach it). Returns a future of
        its result, to await later; one never awaited (its call cut off) logs nothing."""
        loop = asyncio.get_running_loop()
        result: asyncio.Future[T] = loop.create_future()
        result.add_done_callback(_retrieved)

        def copy(done: asyncio.Future[T]) -> None:
            if result.done():
                return
            if (exc := done.exception()) is not None:
                result.set_exception(exc)
            else:
                result.set_result(done.result())

        def submit() -> None:
            try:
                queued = asyncio.wrap_future(self._worker.submit(fn, *args))
            except RuntimeError as exc:  # the worker is shut down: the enforcer is stopping
                result.set_exception(exc)
                return
            queued.add_done_callback(copy)

        loop.call_soon(submit)
        return result

    def submit(self, fn: Callable[..., object], *args: Any) -> None:
        """Runs fn on the worker without waiting for it; its failure is logged."""
        try:
            future = self._worker.submit(fn, *args)
        except RuntimeError:
            return  # the worker is shut down: the enforcer is stopping

        def logged(done: Future[object]) -> None:
            if (exc := done.exception()) is not None:
                log.error("%s failed", getattr(fn, "__name__", fn), exc_info=exc)

        future.add_done_callback(logged)

    def flush_soon(self) -> None:
        """Writes the state shortly after, once for a burst of changes."""
        if self._flush_pending:
            return
        self._flush_pending = True
        loop = asyncio.get_running_loop()

        def flush() -> None:
            self._flush_pending = False
            self.enforcer.flush()

        def submit() -> None:
            # After close() the worker is gone; the final durable write covers this change.
            with contextlib.suppress(RuntimeError):
                self._worker.submit(flush)

        loop.call_later(FLUSH_DELAY_SECONDS, submit)

    async def maintain_forever(self, every: float = MAINTAIN_SECONDS) -> None:
        """Resolves uncertain creations, retries refused re-pins, writes the state."""
        while True:
            await asyncio.sleep(every)
            try:
                await self.run(self.enforcer.maintain)
            except Exception:
                log.exception("periodic maintenance failed; retrying in %.0fs", every)


def _retrieved(future: asyncio.Future[Any]) -> None:
    """Marks a future's exception as seen: whoever awaits it still gets it."""
    if not future.cancelled():
        future.exception()
