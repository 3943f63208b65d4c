"""The plugin's unsolicited UpdateContainers: re-pins no response took, sent when the runtime is
quiet.

A runtime takes two locks around NRI: its own, for each CRI call that reaches NRI, then the NRI
adaptation's, to call the plugins. A plugin's UpdateContainers takes them the other way round
(the adaptation's, then the runtime's, to apply the update). CRI-O 1.34.0 deadlocks there for
good when a container start's PostStartContainer (its lock held, waiting for the adaptation's)
meets an UpdateContainers (the adaptation's held, waiting for CRI-O's): every later CRI call
that reaches NRI hangs (seen here under a burst of pods; cri-o#9835, containerd#13733 for
containerd's form of it). The plugin cannot close that window, only keep out of it: updates go
out when no request of the runtime is in flight at the plugin and none has come for
``QUIET_SECONDS``, which the lifecycle events the plugin does not subscribe to (PostStart,
PostUpdate) follow closely. Until then they wait; a response that can carry updates
(CreateContainer, UpdateContainer, StopContainer, Synchronize) takes them first.
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
# How long the runtime must have sent nothing before an unsolicited update goes out.
QUIET_SECONDS = 1.0


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

    async def quiet(self) -> None:
        """Returns once no request is in flight and none came for ``quiet_seconds``."""
        while True:
            await self._idle.wait()
            left = self._last_request + self.quiet_seconds - time.monotonic()
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
