"""The plugin's unsolicited UpdateContainers: re-pins no response took, sent when the runtime is
quiet.

A runtime takes two locks around NRI: its own, for each CRI call that reaches NRI, then the NRI
adaptation's, to call the plugins. A plugin's UpdateContainers takes them the other way round
(the adaptation's, then the runtime's, to apply the update). CRI-O 1.34.0 deadlocks there for
good when a container start's PostStartContainer (its lock held, waiting for the adaptation's)
meets an UpdateContainers (the adaptation's held, waiting for CRI-O's): every later CRI call
that reaches NRI hangs (seen here under a burst of pods; cri-o#9835, containerd#13733 for
containerd's form of it). The plugin cannot close that window, only keep out of it. Updates go
out when no request of the runtime is in flight at the plugin, no container is between the two
halves of a call the plugin has seen begin (CreateContainer answered, PostCreateContainer not
yet; StartContainer, PostStartContainer not yet; UpdateContainer, PostUpdateContainer not yet:
the runtime sends the second half on its own, with its lock), and none of that changed for
``QUIET_SECONDS``. A half that never comes (a start that failed and was not stopped) holds
nothing back longer than ``WINDOW_SECONDS``. Until then updates wait; a response that can
carry updates (CreateContainer, UpdateContainer, StopContainer, Synchronize) takes them first.
What stays open is a CRI call that reaches the runtime's NRI lock in the instant the plugin
sends: only the runtime's fix closes that.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from enforcer.nri.connection import OK, UNAVAILABLE, ConnectionClosed, NriConnection, TtrpcError
from enforcer.nri.observe import Observer
from enforcer.nri.runtime import NriRuntime
from enforcer.nri.session import RUNTIME_SERVICE
from enforcer.nriapi import api_pb2

log = logging.getLogger(__name__)

UPDATE_TIMEOUT = 2.0
# How long the runtime must have been quiet before an unsolicited update goes out.
QUIET_SECONDS = 0.25
# A call's second half that has not come by then is not waited for any more.
WINDOW_SECONDS = 30.0
MAX_WINDOWS = 4096  # bounded: a runtime that never sends the second halves cannot grow it


class UpdateSender:
    """Counts the runtime's requests in flight and sends the queued updates in the quiet."""

    def __init__(
        self,
        runtime: NriRuntime,
        observe: Observer,
        after_sent: Callable[[], None],
        quiet_seconds: float = QUIET_SECONDS,
    ) -> None:
        self.runtime = runtime
        self.observe = observe
        self.after_sent = after_sent  # the engine's sweep, once the runtime had its say
        self.quiet_seconds = quiet_seconds
        self.work = asyncio.Event()  # set: updates may be queued
        self._busy = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._last_request = 0.0
        self._open: dict[str, float] = {}  # container id -> when its call's first half ended

    def serving(
        self, fn: Callable[[bytes], Awaitable[bytes]]
    ) -> Callable[[bytes], Awaitable[bytes]]:
        """``fn`` (a handler of the runtime's requests), counted in flight."""

        async def handle(payload: bytes) -> bytes:
            self._busy += 1
            self._idle.clear()
            self._last_request = time.monotonic()
            try:
                return await fn(payload)
            finally:
                self._busy -= 1
                self._last_request = time.monotonic()
                if not self._busy:
                    self._idle.set()

        return handle

    def opened(self, container_id: str) -> None:
        """The first half of a container's call was answered; the runtime sends the second."""
        if len(self._open) >= MAX_WINDOWS:
            self._open.pop(next(iter(self._open)))
        self._open[container_id] = time.monotonic()

    def closed(self, container_id: str) -> None:
        """The second half came (or the container stopped or went)."""
        self._open.pop(container_id, None)

    def _waiting_for(self, now: float) -> float:
        """Seconds until the runtime counts as quiet (0: it is)."""
        for cid, since in list(self._open.items()):
            if now - since > WINDOW_SECONDS:
                log.warning(
                    "container %s: the runtime did not finish its call in %gs; unsolicited "
                    "updates wait for it no more",
                    cid,
                    WINDOW_SECONDS,
                )
                del self._open[cid]
        if self._open:
            return min(0.1, self.quiet_seconds)
        return self._last_request + self.quiet_seconds - now

    async def quiet(self) -> None:
        """Returns once no request is in flight, no call is half done and nothing of that
        changed for ``quiet_seconds``."""
        while True:
            await self._idle.wait()
            left = self._waiting_for(time.monotonic())
            if left <= 0 and self._idle.is_set():
                return
            await asyncio.sleep(max(left, 0.01))

    async def run(self, connection: NriConnection) -> None:
        """Until ``connection`` closes: each time there is work, in the quiet, the queued
        updates in one UpdateContainers call."""
        while not connection.closed.is_set():
            await self.work.wait()
            self.work.clear()
            await self.quiet()
            updates = self.runtime.take_updates()
            if not updates or connection.closed.is_set():
                continue
            if not await self._send(connection, updates):
                return

    async def _send(
        self, connection: NriConnection, updates: list[api_pb2.ContainerUpdate]
    ) -> bool:
        request = api_pb2.UpdateContainersRequest(update=updates)
        start = time.perf_counter()
        try:
            reply = api_pb2.UpdateContainersResponse.FromString(
                await connection.call(
                    RUNTIME_SERVICE,
                    "UpdateContainers",
                    request.SerializeToString(),
                    timeout=UPDATE_TIMEOUT,
                )
            )
        except ConnectionClosed:
            self.observe("UpdateContainers", UNAVAILABLE, time.perf_counter() - start, "")
            return False
        except TtrpcError as exc:
            self.observe("UpdateContainers", exc.code, time.perf_counter() - start, "")
            log.error("UpdateContainers of %d containers failed: %s", len(updates), exc)
            reply = api_pb2.UpdateContainersResponse(failed=updates)
        else:
            self.observe("UpdateContainers", OK, time.perf_counter() - start, "")
        for failed in reply.failed:
            log.error(
                "the runtime did not re-pin container %s to cpus=%s (the periodic check retries)",
                failed.container_id,
                failed.linux.resources.cpu.cpus,
            )
        self.runtime.confirmed(u.container_id for u in updates)
        self.after_sent()
        return True
