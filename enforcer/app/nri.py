"""`resource-enforcer nri`: the engine as an NRI plugin of the runtime, until stopped.

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
import signal
from functools import partial

from enforcer.app.dra_start import start_dra
from enforcer.app.health import NOT_SYNCHRONIZED, SERVING, STANDBY, HealthFile
from enforcer.app.metrics_endpoint import MetricsEndpoint
from enforcer.app.run import (
    ignore_late_signals,
    log_stopped,
    metrics_address,
    prepare,
    reconcile_once,
    restore_or_take_over,
    save_at_stop,
    start_configuration,
)
from enforcer.app.usage_watch import UsageWatch, topology_writer
from enforcer.controllers.cpuset import CpusetController
from enforcer.handover import StateLock
from enforcer.nri.plugin import NriPlugin
from enforcer.nri.runtime import NriRuntime, PendingCpusets
from enforcer.nri.session import Session
from enforcer.options import RunOptions
from resource_contract.quantities import parse_quantity

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


async def serve_nri(options: RunOptions, lock_wait: float = LOCK_WAIT_SECONDS) -> int:
    stop = asyncio.Event()
    reload = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, reload.set)
    runtime = NriRuntime()
    node = prepare(options, runtime)
    if node is None:
        return 1
    enforcer, store, lock, metrics = node.enforcer, node.store, node.lock, node.metrics
    health = HealthFile(options.health_file)
    if not node.first:
        waiting = asyncio.create_task(health.keep_saying(lambda: STANDBY))
        held = await hold_state_lock(lock, stop, lock_wait)
        waiting.cancel()
        if not held:
            health.remove()
            return 0 if stop.is_set() else EXIT_LOCKED_OUT
        node.first = True  # loaded below, as by a process that took the lock at start
        log.info("the state folder %s is ours now", options.state_dir)
    cpuset = enforcer.controllers.get("cpuset") if enforcer.controllers is not None else None
    if isinstance(cpuset, CpusetController) and cpuset.reader is not None:
        # An update the runtime has not applied yet is not read back as a difference.
        cpuset.reader = PendingCpusets(cpuset.reader, runtime)
    plugin = NriPlugin(
        enforcer,
        runtime,
        reconcile=partial(reconcile_once, enforcer, store),
        rdt_by_runtime=runtime_applies_rdt(options.resctrl_root),
        observe=metrics.observe_nri,
    )
    tasks = restore_or_take_over(node, plugin)
    # The quantity parser's import (~0.4 s) is paid now, not by the first CreateContainer.
    tasks.append(asyncio.ensure_future(plugin.run(parse_quantity, "1")))
    socket_path = options.nri_socket.removeprefix("unix://")
    session = Session(
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
        enforcer.config.policy.name,
        node.start.source,
    )
    metrics_server = MetricsEndpoint(
        metrics_address(node),
        metrics,
        plugin,
        not_serving="the NRI plugin is not registered and synchronized with the runtime",
    )
    metrics_server.start()

    async def health_of_reconcile() -> None:
        while True:
            metrics_server.reconcile_failed = plugin.reconcile_failed
            await asyncio.sleep(0.5)

    tasks.append(asyncio.create_task(health_of_reconcile()))

    def health_word() -> str:
        if lock.fd is None or stop.is_set() or store.problem is not None:
            return STANDBY
        # Not synchronized: the runtime calls no plugin it has not synchronized; for longer
        # than a moment, the plugin is left out (the liveness probe fails on this word).
        return SERVING if plugin.listening else NOT_SYNCHRONIZED

    heartbeat = asyncio.create_task(health.keep_saying(health_word))
    tasks.append(asyncio.create_task(plugin.maintain_forever()))
    # The gauges by pool and NUMA node, and the NodeResourceTopology, as in relay mode.
    watch = UsageWatch(enforcer, plugin.run, metrics, topology_writer(options))
    tasks.append(asyncio.create_task(watch.run()))
    manager, source = start_configuration(node, plugin, reload, tasks)
    dra = start_dra(options, enforcer, plugin, tasks)
    await session.run(stop)
    log.info("stopping: the runtime goes on without the plugin until it is back")
    manager.closed = True
    for task in tasks:
        task.cancel()
    dra.stop()
    lock.abandon()
    if source is not None:
        await asyncio.to_thread(source.stop)
    # Frequencies and C-states back as they were (CPU classes).
    await save_at_stop(plugin, enforcer, timeout=options.grace_period or None, restore_node=True)
    lock.release()
    metrics_server.close()
    plugin.close()
    heartbeat.cancel()
    health.remove()
    log_stopped(store)
    ignore_late_signals()
    return 0
