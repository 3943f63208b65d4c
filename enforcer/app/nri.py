"""`resource-enforcer nri`: the NRI plugin as the transport of the daemon's sequence (``daemon``).

The same start-up as `run` (machine, state folder and lock, configuration from the file or the
cluster, metrics, status), then the plugin registers on the runtime's NRI socket and serves
its events; when the runtime goes (restart, closed connection, or it left the plugin out), it
registers again with backoff, and the runtime's Synchronize brings the engine back in line.
Runs until SIGTERM or SIGINT: the connection is closed (the runtime goes on without the plugin:
NRI is fail-open), the state written.

The plugin registers only once it holds the state folder's lock: a registered plugin is called
for every container, and one that cannot decide (another instance holds the state) would make
the runtime fail every creation. A second instance waits, not registered, up to
`LOCK_WAIT_SECONDS`, then gives up: a log line, exit code `EXIT_LOCKED_OUT`.
"""

from __future__ import annotations

import asyncio
import logging
import os
from functools import partial

from enforcer.app.daemon import Background, Transport, run_daemon
from enforcer.app.health import NOT_SYNCHRONIZED, SERVING, STANDBY, HealthFile
from enforcer.app.metrics_endpoint import MetricsEndpoint, Serving
from enforcer.app.node import Node, reconcile_once
from enforcer.controllers.cpuset import CpusetReader
from enforcer.handover import StateLock
from enforcer.nri.plugin import NriPlugin
from enforcer.nri.runtime import NriRuntime, PendingCpusets
from enforcer.nri.session import Session
from enforcer.options import RunOptions
from enforcer.worker import EngineWorker

log = logging.getLogger("enforcer")

REAL_RESCTRL = "/sys/fs/resctrl"
# How long a second instance waits for the state lock before it gives up (longer than the
# incumbent's default --grace-period, so one that is stopping gets to finish).
LOCK_WAIT_SECONDS = 60.0
EXIT_LOCKED_OUT = 3


def runtime_applies_rdt(resctrl_root: str) -> bool:
    """The runtime (runc) writes an RDT class given in the adjustment into the resctrl file
    system at /sys/fs/resctrl; where the enforcer is given another root, it applies the class
    itself, as the relay does."""
    return os.path.realpath(resctrl_root) == REAL_RESCTRL and os.path.isdir(
        os.path.join(REAL_RESCTRL, "info")
    )


async def hold_state_lock(lock: StateLock, stop: asyncio.Event, wait: float) -> bool:
    """Waits, not registered, for the state folder's lock another process holds: True once
    it is ours; False when stopped, or after ``wait`` seconds (a log line says it gave up)."""
    folder = lock.path.parent
    log.warning(
        "enforcer pid %s holds the state folder %s: not registering with the runtime until it "
        "is ours (a registered plugin that cannot decide would fail every container)",
        lock.holder(),
        folder,
    )
    acquiring = asyncio.ensure_future(asyncio.to_thread(lock.acquire))
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({acquiring, stopped}, timeout=wait, return_when="FIRST_COMPLETED")
    finally:
        stopped.cancel()
    if not acquiring.done():
        lock.abandon()  # the thread returns at its next poll
    if await acquiring:
        return True
    if not stop.is_set():
        log.error(
            "gave up after %gs: enforcer pid %s still holds the state folder %s; not "
            "registering with the runtime (exit %d). Run one plugin per node and state folder.",
            wait,
            lock.holder(),
            folder,
            EXIT_LOCKED_OUT,
        )
    return False


class NriTransport(Transport):
    """The plugin's session on the runtime's NRI socket, registered once the state is ours."""

    name = "nri"
    not_serving = "the NRI plugin is not registered and synchronized with the runtime"

    def __init__(self, options: RunOptions, lock_wait: float) -> None:
        self.options = options
        self.lock_wait = lock_wait
        self.runtime = self.nri_runtime = NriRuntime()
        self.plugin: NriPlugin | None = None
        self.session: Session | None = None

    async def ready(self, node: Node, stop: asyncio.Event, health: HealthFile) -> int | None:
        if node.first:
            return None
        waiting = asyncio.create_task(health.keep_saying(lambda: STANDBY))
        held = await hold_state_lock(node.lock, stop, self.lock_wait)
        waiting.cancel()
        if not held:
            health.remove()
            return 0 if stop.is_set() else EXIT_LOCKED_OUT
        node.first = True  # loaded next, as by a process that took the lock at start
        log.info("the state folder %s is ours now", self.options.state_dir)
        return None

    def cpuset_reader(self, kernel: CpusetReader) -> CpusetReader:
        """An update the runtime has not applied yet is not read back as a difference."""
        return PendingCpusets(kernel, self.nri_runtime)

    def worker(self, node: Node) -> EngineWorker:
        enforcer, runtime = node.enforcer, self.nri_runtime
        self.plugin = NriPlugin(
            EngineWorker(enforcer),
            runtime,
            reconcile=partial(reconcile_once, enforcer, node.store),
            rdt_by_runtime=runtime_applies_rdt(self.options.resctrl_root),
            observe=node.metrics.observe_nri,
        )
        return self.plugin.worker

    async def start(self, node: Node) -> Serving:
        plugin, options = self.plugin, self.options
        assert plugin is not None
        socket_path = options.nri_socket.removeprefix("unix://")
        self.session = Session(
            socket_path,
            options.plugin_name,
            options.plugin_index,
            plugin.handlers(),
            on_connect=plugin.connected,
            on_disconnect=plugin.disconnected,
        )
        log.info(
            "NRI plugin %s-%s on %s; policy %s (configuration: %s)",
            options.plugin_index,
            options.plugin_name,
            socket_path,
            node.enforcer.config.policy.name,
            node.start.source,
        )
        return plugin

    def health_word(self, node: Node, stop: asyncio.Event) -> str:
        if node.lock.fd is None or stop.is_set() or node.store.problem is not None:
            return STANDBY
        # Not synchronized: the runtime calls no plugin it has not synchronized; for longer
        # than a moment, the plugin is left out (the liveness probe fails on this word).
        return SERVING if self.plugin is not None and self.plugin.listening else NOT_SYNCHRONIZED

    def background(
        self, node: Node, endpoint: MetricsEndpoint, stop: asyncio.Event
    ) -> list[Background]:
        plugin = self.plugin
        assert plugin is not None

        async def health_of_reconcile() -> None:
            while True:
                endpoint.reconcile_failed = plugin.reconcile_failed
                await asyncio.sleep(0.5)

        return [health_of_reconcile()]

    async def serve(self, stop: asyncio.Event) -> None:
        assert self.session is not None
        await self.session.run(stop)
        log.info("stopping: the runtime goes on without the plugin until it is back")

    async def stop_serving(self, grace_period: float) -> None:
        """Nothing: the session is closed (NRI is fail-open: the runtime goes on without us)."""

    @property
    def save_timeout(self) -> float | None:
        return self.options.grace_period or None

    async def after_save(self, node: Node, stop: asyncio.Event) -> None:
        """Nothing: no path is left behind (the runtime calls no plugin that is gone)."""

    def close(self) -> None:
        if self.plugin is not None:
            self.plugin.worker.close()


async def serve_nri(options: RunOptions, lock_wait: float = LOCK_WAIT_SECONDS) -> int:
    return await run_daemon(options, NriTransport(options, lock_wait))
