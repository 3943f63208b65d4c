"""The daemon's /metrics and /healthz, bound in the background while the port is taken.

The server itself is ``enforcer.app.metrics_server.MetricsServer``. /healthz says not ready
while the transport does not serve (the relay does not listen, the NRI plugin is not
registered) or the last reconciliation with the runtime failed.
"""

from __future__ import annotations

import asyncio
import errno
import logging
from typing import Protocol

from enforcer.app.metrics_server import MetricsServer
from enforcer.metrics import EnforcerMetrics

log = logging.getLogger("enforcer")

METRICS_RETRY_SECONDS = 2.0


class Serving(Protocol):
    """The transport: the relay's server, or the NRI plugin's session."""

    @property
    def listening(self) -> bool: ...


class MetricsEndpoint:
    """/metrics and /healthz. The port may be taken for a moment (the enforcer this one takes
    over from still holds it, with hostNetwork): then binding is retried in the background,
    never holding up the relay."""

    def __init__(
        self,
        address: str,
        metrics: EnforcerMetrics,
        relay: Serving,
        not_serving: str = "the relay does not listen",
    ) -> None:
        self.address = address
        self.not_serving = not_serving
        self.metrics = metrics
        self.relay = relay
        self.server: MetricsServer | None = None
        self._task: asyncio.Task[None] | None = None
        # Set by the reconciliation loop: why the last attempt failed, None once it succeeded.
        self.reconcile_failed: str | None = None

    def healthy(self) -> bool:
        return self.not_ready() is None

    def not_ready(self) -> str | None:
        """Why /healthz answers 503; None when it answers ok."""
        if not self.relay.listening:
            return self.not_serving
        if self.reconcile_failed is not None:
            return f"the last reconciliation with the runtime failed: {self.reconcile_failed}"
        return None

    def _try(self) -> OSError | None:
        try:
            self.server = MetricsServer(self.address, self.metrics, self.not_ready).start()
        except OSError as exc:
            return exc
        log.info("metrics on http://%s/metrics", self.address)
        return None

    def start(self) -> None:
        if not self.address:
            return
        error = self._try()
        if error is not None:
            log.warning("metrics address %s: %s; retrying", self.address, error.strerror)
            if error.errno == errno.EADDRINUSE:
                self._task = asyncio.create_task(self._retry())

    async def _retry(self) -> None:
        while self._try() is not None:
            await asyncio.sleep(METRICS_RETRY_SECONDS)

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        if self.server is not None:
            self.server.close()
            self.server = None
