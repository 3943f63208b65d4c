"""The one start and stop sequence of both daemons (`run`, `nri`), parameterized by the transport.

Start: signals are ours from the first moment; the machine, the state folder and the
configuration are read and the engine built (``node.prepare``); the transport gets ready
(``Transport.ready``: NRI waits here for a state lock another process holds) and makes the
worker that holds the engine; the saved state is loaded (or taking over from another enforcer is
queued on the worker) before the transport serves; then metrics, the health file, the worker's
maintenance, the usage gauges, the live configuration, the transport's own background work and
the services started with the daemon (``services_with_the_daemon``).

Stop (SIGTERM, SIGINT, or the transport's own end such as a relay's hand-over): no configuration
is applied any more, background work is cancelled, the transport stops serving (finishing calls
in flight within the grace period), the state is written one last time, the lock released, and
what the transport leaves behind left (a relay's fallback link); exit 0.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from abc import ABC, abstractmethod
from collections.abc import Coroutine
from typing import Any

from enforcer.app.dra_start import serve_dra
from enforcer.app.health import HealthFile
from enforcer.app.metrics_endpoint import MetricsEndpoint, Serving
from enforcer.app.node import (
    Node,
    metrics_address,
    prepare,
    restore_or_take_over,
    start_configuration,
)
from enforcer.app.usage_watch import UsageWatch, topology_writer
from enforcer.controllers.cpuset import CpusetReader
from enforcer.engine import Enforcer, StateWriteFailed
from enforcer.engine.ports import Runtime
from enforcer.options import RunOptions
from enforcer.state import StateStore
from enforcer.worker import EngineWorker
from resource_contract.quantities import parse_quantity

log = logging.getLogger("enforcer")

Background = Coroutine[Any, Any, None]


def services_with_the_daemon(node: Node, worker: EngineWorker) -> list[Background]:
    """Extra services started with either daemon once its transport serves, and cancelled at
    stop, before the state's last write (the one place to add one)."""
    return [serve_dra(node.options, node.enforcer, worker)]


class Transport(ABC):
    """What one daemon's transport adds to the shared sequence (``run_daemon``)."""

    name: str  # in log lines
    runtime: Runtime  # the engine's port to the container runtime
    not_serving = "the relay does not listen"  # /readyz while ``serving`` does not listen

    def cpuset_reader(self, kernel: CpusetReader) -> CpusetReader:
        """The reader of containers' cpusets the engine verifies with, over the kernel's."""
        return kernel

    async def ready(self, node: Node, stop: asyncio.Event, health: HealthFile) -> int | None:
        """Before the worker exists: None to go on, or the exit code to stop with."""
        return None

    @abstractmethod
    def worker(self, node: Node) -> EngineWorker:
        """The worker that holds the engine and serves the transport's calls."""

    @abstractmethod
    async def start(self, node: Node) -> Serving:
        """Start serving; what says whether the transport listens (metrics, readiness)."""

    @abstractmethod
    def health_word(self, node: Node, stop: asyncio.Event) -> str:
        """The health file's word now (``health``: serving, standby, not-synchronized)."""

    def background(
        self, node: Node, endpoint: MetricsEndpoint, stop: asyncio.Event
    ) -> list[Background]:
        """The transport's own work while it serves (cancelled at stop)."""
        return []

    @abstractmethod
    async def serve(self, stop: asyncio.Event) -> None:
        """Serve until ``stop`` is set or the transport's own end."""

    @abstractmethod
    async def stop_serving(self, grace_period: float) -> None:
        """Stop accepting and finish the calls in flight, within ``grace_period`` seconds."""

    @property
    def save_timeout(self) -> float | None:
        """How long the last write of the state may take (None: no limit)."""
        return None

    @property
    def restores_node(self) -> bool:
        """Whether stopping puts back what the controllers changed on the node as a whole (not
        when another enforcer takes over)."""
        return True

    @abstractmethod
    async def after_save(self, node: Node, stop: asyncio.Event) -> None:
        """After the state's last write and the lock's release."""

    @abstractmethod
    def close(self) -> None:
        """The transport's connections and threads, at the very end (also after a failed start)."""


async def run_daemon(options: RunOptions, transport: Transport) -> int:
    """The daemon, from start to exit code, over ``transport``."""
    # Signals are ours from the first moment: a stop asked for during start-up is honoured
    # once serving (never a half-started daemon killed), a reload then finds nothing to do.
    stop = asyncio.Event()
    reload = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, reload.set)
    node = prepare(options, transport.runtime, transport.cpuset_reader)
    if node is None:
        transport.close()
        return 1
    enforcer, store, lock, metrics = node.enforcer, node.store, node.lock, node.metrics
    health = HealthFile(options.health_file)
    refused = await transport.ready(node, stop, health)
    if refused is not None:
        transport.close()
        return refused
    worker = transport.worker(node)
    tasks = restore_or_take_over(node, worker)
    await asyncio.sleep(0)  # submitted to the worker before the transport takes a call
    serving = await transport.start(node)
    endpoint = MetricsEndpoint(
        metrics_address(node), metrics, serving, not_serving=transport.not_serving
    )
    endpoint.start()
    heartbeat = asyncio.create_task(health.keep_saying(lambda: transport.health_word(node, stop)))
    # The quantity parser's import (~0.4 s) is paid on the worker now, once the transport
    # serves, rather than by the first CreateContainer.
    tasks.append(asyncio.ensure_future(worker.run(parse_quantity, "1")))
    tasks.append(asyncio.create_task(worker.maintain_forever()))
    # The gauges by pool and NUMA node, and the NodeResourceTopology: after decisions, off
    # the calls' path.
    watch = UsageWatch(enforcer, worker.run, metrics, topology_writer(options))
    tasks.append(asyncio.create_task(watch.run()))
    for work in transport.background(node, endpoint, stop):
        tasks.append(asyncio.create_task(work))
    for service in services_with_the_daemon(node, worker):
        tasks.append(asyncio.create_task(service))
    manager, source = start_configuration(node, worker, reload, tasks)
    await transport.serve(stop)
    manager.closed = True  # no configuration is applied from here on
    for task in tasks:
        task.cancel()
    lock.abandon()  # when still waiting to take over: stop waiting
    if source is not None:
        await asyncio.to_thread(source.stop)
    await transport.stop_serving(options.grace_period)
    # Frequencies and C-states back as they were (the successor of a hand-over keeps them).
    await save_at_stop(
        worker, enforcer, timeout=transport.save_timeout, restore_node=transport.restores_node
    )
    lock.release()
    endpoint.close()
    await transport.after_save(node, stop)
    transport.close()
    heartbeat.cancel()
    health.remove()
    log_stopped(store)
    ignore_late_signals()
    return 0


async def save_at_stop(
    worker: EngineWorker, enforcer: Enforcer, *, timeout: float | None, restore_node: bool
) -> None:
    """The state written one last time (within `timeout`), then, unless another enforcer takes
    over, what the controllers changed on the node as a whole put back."""
    try:
        await asyncio.wait_for(worker.run(enforcer.persist), timeout)
    except StateWriteFailed as exc:
        log.error("%s: the state of this stop is lost; the next start rebuilds it", exc)
    except TimeoutError:
        log.error("the state could not be written within the grace period")
    if restore_node:
        await worker.run(enforcer.shutdown)


def ignore_late_signals() -> None:
    """Stopped: a SIGTERM or SIGINT sent again now (kubelet, an operator, a test) would kill the
    exiting process and turn its clean stop into a death by signal; they are ignored."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.remove_signal_handler(sig)
        signal.signal(sig, signal.SIG_IGN)


def log_stopped(store: StateStore) -> None:
    if store.problem:
        log.warning("stopped without saving the state: %s", store.problem)
    else:
        log.info("stopped; state saved in %s", store.path)


def on_uvloop(main: Coroutine[Any, Any, int]) -> int:
    """Runs a daemon's main coroutine on uvloop (libuv): the relay's per-call cost, mostly the
    loop's own work moving bytes between two sockets, is lower there than on asyncio's."""
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)
