"""Following the node's use after decisions: the pool and NUMA node gauges, and the
NodeResourceTopology in the cluster.

A background task, never on the relay's hot path: every POLL_SECONDS it looks at the engine's
change counter (a plain integer read); when placements changed, it measures the use once on the
engine's worker (between calls, O(containers)), sets the gauges, and, when
`nodeResourceTopology.enabled`, has the object written from a thread of its own, at most once
per `nodeResourceTopology.minIntervalSeconds`. Every RESYNC_SECONDS the object is read back and
written again if someone deleted or changed it. Switched off at run time, the object is
deleted: a scheduler must not keep reading what the node no longer says.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from enforcer.app.errors import StartError
from enforcer.cluster.client import in_cluster, make_api_client
from enforcer.cluster.topology_writer import TopologyWriteError, TopologyWriter
from enforcer.engine import Enforcer
from enforcer.metrics import EnforcerMetrics
from enforcer.options import RunOptions
from enforcer.usage import Usage, alignment
from resource_contract.config import Config

log = logging.getLogger("enforcer")

T = TypeVar("T")
OnWorker = Callable[[Callable[[], T]], Awaitable[T]]

POLL_SECONDS = 0.5
RESYNC_SECONDS = 300.0


def topology_writer(options: RunOptions) -> TopologyWriter | StartError:
    """The writer for this node, or why there can be none (no node name, no credentials)."""
    if not options.node_name:
        return StartError("it needs the node's name (--node-name or $NODE_NAME)")
    if not (options.kubeconfig or in_cluster()):
        return StartError("it needs API credentials (--kubeconfig, or a pod's service account)")
    kubeconfig = options.kubeconfig
    return TopologyWriter(lambda: make_api_client(kubeconfig), options.node_name)


class UsageWatch:
    def __init__(
        self,
        enforcer: Enforcer,
        on_worker: OnWorker[Usage],
        metrics: EnforcerMetrics,
        writer: TopologyWriter | StartError,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.enforcer = enforcer
        self.on_worker = on_worker
        self.metrics = metrics
        self.writer = writer
        self.clock = clock
        self.usage: Usage | None = None
        self._measured_at_change: int | None = None
        self._config: Config | None = None
        self._pending = False  # the cluster's object is behind the last measurement
        self._written_at = -float("inf")
        self._resync_at = clock() + RESYNC_SECONDS
        self._last_error = ""
        self._said_off = False

    async def run(self) -> None:
        while True:
            try:
                await self.step()
            except asyncio.CancelledError:
                raise
            except Exception:  # never let a bug here stop the gauges for good
                log.exception("measuring the node's use failed; trying again")
            await asyncio.sleep(POLL_SECONDS)

    async def step(self) -> None:
        enforcer = self.enforcer
        changes = enforcer.changes
        if changes != self._measured_at_change or self.usage is None:
            self.usage = await self.on_worker(enforcer.usage)
            self._measured_at_change = changes
            self.metrics.set_usage(self.usage)
            self._pending = True
        config = enforcer.config
        if config is not self._config:
            self._config = config
            self._pending = True  # the alignment may have changed, or publishing itself
        settings = config.nodeResourceTopology
        writer = self.writer
        if not settings.enabled:
            if isinstance(writer, TopologyWriter) and writer.published:
                await self._call(writer.delete, "deleted (nodeResourceTopology.enabled is off)")
            return
        if isinstance(writer, StartError):
            if not self._said_off:
                log.error(
                    "nodeResourceTopology.enabled: no NodeResourceTopology is published: %s",
                    writer,
                )
                self._said_off = True
            return
        now = self.clock()
        force = now >= self._resync_at
        if not (self._pending or force) or now - self._written_at < settings.minIntervalSeconds:
            return
        how = alignment(
            self.usage.policy, settings.topologyManagerPolicy, settings.topologyManagerScope
        )
        usage = self.usage
        self._written_at = now
        if force:
            self._resync_at = now + RESYNC_SECONDS
        outcome = await self._call(lambda: writer.write(usage, how, force=force), "")
        if outcome is not None:
            self._pending = False

    async def _call(self, fn: Callable[[], object], done: str) -> object | None:
        """Runs a write in a thread; None when it failed (logged once per distinct reason)."""
        try:
            result = await asyncio.to_thread(fn)
        except TopologyWriteError as exc:
            self.metrics.topology_writes.labels("failed").inc()
            self.metrics.controller_errors.labels("node-resource-topology").inc()
            reason = str(exc)
            if reason != self._last_error:
                log.warning("NodeResourceTopology not written (retrying): %s", reason)
                self._last_error = reason
            return None
        if self._last_error:
            log.info("NodeResourceTopology written again after: %s", self._last_error)
            self._last_error = ""
        if result is True:
            self.metrics.topology_writes.labels("written").inc()
        if done:
            log.info("NodeResourceTopology %s", done)
        return result
