"""`resource-enforcer run`: the wiring of the relay and the enforcer behind it, until stopped.

Runs until SIGTERM or SIGINT. The relay comes first and never waits for anything else: kubelet
reaches the runtime only through it. The runtime may come later (reconciliation retries), the
API server later still, or never (the configuration then comes from the state folder or the
--config file).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from enforcer import handover
from enforcer.app.cluster_source import ClusterSettings, cluster_settings, start_cluster_source
from enforcer.app.config_precedence import ConfigManager, Start, starting_configs
from enforcer.app.dra_start import start_dra
from enforcer.app.errors import StartError
from enforcer.app.health import HealthFile
from enforcer.app.metrics_endpoint import MetricsEndpoint
from enforcer.app.owned_state import OwnedStateStore
from enforcer.app.usage_watch import UsageWatch, topology_writer
from enforcer.app.watch import ConfigWatcher
from enforcer.cluster import LastGoodStore
from enforcer.cluster.config_source import ClusterConfigSource
from enforcer.controllers.base import Roots
from enforcer.controllers.errors import ApplyError
from enforcer.controllers.registry import node_controllers
from enforcer.engine import Enforcer, StateWriteFailed
from enforcer.engine.ports import Runtime, RuntimeAway
from enforcer.metrics import EnforcerMetrics
from enforcer.options import RunOptions
from enforcer.relay.h2 import RelayServer, serve_relay
from enforcer.relay.service import CRIService
from enforcer.runtime import RuntimeClient
from enforcer.state import StateStore
from enforcer.topology import Topology, TopologyError, read_topology
from enforcer.worker import EngineWorker
from resource_contract.config import ConfigError, is_host_port
from resource_contract.quantities import parse_quantity

log = logging.getLogger("enforcer")

IMAGE_SERVICE = "/runtime.v1.ImageService/"
RECONCILE_RETRY_SECONDS = 2.0
SUCCESSOR_POLL_SECONDS = 0.5


def _socket_path(value: str) -> str:
    return value.removeprefix("unix://")


def _check_address(address: str) -> None:
    if not is_host_port(address):
        raise StartError(f"--metrics-address {address!r} is not HOST:PORT")


def build_enforcer(
    options: RunOptions,
    topology: Topology,
    store: StateStore,
    metrics: EnforcerMetrics,
    start: Start,
    runtime: Runtime,
) -> Enforcer:
    controllers = node_controllers(
        Roots(
            cgroupfs=options.cgroupfs_root, sysfs=options.sysfs_root, resctrl=options.resctrl_root
        ),
        topology,
    )
    for warning in controllers.configure(start.config):
        log.warning("%s", warning)
    return Enforcer(
        topology=topology,
        config=start.config,
        store=store,
        runtime=runtime,
        metrics=metrics,
        controllers=controllers,
    )


@dataclass
class Node:
    """What both modes (relay and NRI) set up before they serve: the machine, the state
    folder and its lock, the configuration and the engine over the transport's runtime port."""

    options: RunOptions
    cluster: ClusterSettings | None
    lock: handover.StateLock
    store: OwnedStateStore
    last_good: LastGoodStore | None
    metrics: EnforcerMetrics
    start: Start
    enforcer: Enforcer
    first: bool  # this process holds the state lock (else it takes over from another)


def prepare(options: RunOptions, runtime: Runtime) -> Node | None:
    """Reads the machine, the state folder and the configuration and builds the engine; None
    (after logging why) when the enforcer cannot start."""
    try:
        if options.metrics_address is not None:
            _check_address(options.metrics_address)
        cluster = cluster_settings(options)
        topology = read_topology(options.sysfs_root)
        lock = handover.StateLock(options.state_dir)
        store = OwnedStateStore(options.state_dir, lock)
        store.ensure_dir()
        last_good = LastGoodStore(options.state_dir) if cluster is not None else None
        metrics = EnforcerMetrics()
        starts = starting_configs(options, last_good)
        enforcer: Enforcer | None = None
        for i, start in enumerate(starts):
            try:
                enforcer = build_enforcer(options, topology, store, metrics, start, runtime)
                break
            except (ConfigError, ApplyError) as exc:
                if i == len(starts) - 1:
                    raise
                log.error("configuration from %s does not fit this node: %s", start.source, exc)
        assert enforcer is not None
        try:
            first = lock.try_acquire()
        except OSError as exc:
            # No lock file can be made, so nobody can change the state in this folder: this
            # process serves, refusing decisions, and takes the lock once the folder is writable.
            store.lock_failed(exc)
            first = True
        metrics.state_writable.set_function(lambda: 0.0 if store.problem else 1.0)
    except StartError as exc:
        log.error("cannot start: %s", exc)
        return None
    except ConfigError as exc:
        for problem in exc.problems:
            log.error("configuration refused: %s", problem)
        return None
    except (TopologyError, ApplyError, OSError) as exc:
        log.error("cannot start: %s", exc)
        return None
    return Node(options, cluster, lock, store, last_good, metrics, start, enforcer, first)


def restore_or_take_over(node: Node, worker: EngineWorker) -> list[asyncio.Future[Any]]:
    """Loads the saved state, or (another enforcer holds the node) queues taking it over on
    the worker, ahead of any call the transport will submit."""
    enforcer, store, lock = node.enforcer, node.store, node.lock
    if node.first:
        enforcer.restore_saved()
        if store.problem:
            enforcer.registry.dirty = True  # the maintenance loop retries the write till it works
        return []
    # Another enforcer runs on this node (a DaemonSet update): our calls queue on the worker
    # behind taking over its state, which it hands over once it sees us.
    log.info("enforcer pid %s runs on this node; taking over from it", lock.holder())

    def take_over() -> None:
        try:
            if lock.acquire():
                enforcer.restore_saved()
                log.info("took over the state in %s", node.options.state_dir)
                return
        except Exception:
            log.exception("taking over the state in %s failed", node.options.state_dir)
        # Without the state, no decision of this process could be right: the calls queued
        # behind the take-over (and any later) are refused, for kubelet to retry.
        enforcer.not_in_charge = "the enforcer is stopping before it took over the node"

    return [asyncio.ensure_future(worker.run(take_over))]


def start_configuration(
    node: Node, worker: EngineWorker, reload: asyncio.Event, tasks: list[asyncio.Future[Any]]
) -> tuple[ConfigManager, ClusterConfigSource | None]:
    """Live configuration: the --config file (on change and SIGHUP) and the cluster's
    ConfigMaps, applied through the worker."""
    options = node.options
    manager = ConfigManager(
        worker,
        node.enforcer,
        file=options.config,
        last_good=node.last_good,
        source=node.start.source,
        text=node.start.text,
    )
    if options.config:
        tasks.append(asyncio.create_task(ConfigWatcher(options.config, manager, reload).run()))
    source = None
    if node.cluster is not None:
        source = start_cluster_source(node.cluster, manager, node.metrics)
    return manager, source


def metrics_address(node: Node) -> str:
    """The flag when given, else the configuration's metrics.address (read at start)."""
    options = node.options
    if options.metrics_address is not None:
        return options.metrics_address
    return node.start.config.metrics.address


def reconcile_once(enforcer: Enforcer, store: StateStore) -> bool:
    """One reconciliation, on the worker (after any take-over queued before it). A saved state
    that cannot be read is read again first: reconciling without it would decide blind."""
    if store.read_problem is not None:
        enforcer.restore_saved()
        if store.read_problem is not None:
            return False
    enforcer.reconcile()
    return True


async def run(options: RunOptions) -> int:
    # Signals are ours from the first moment: a stop asked for during start-up is honoured
    # once serving (never a half-started relay killed), a reload then finds nothing to do.
    stop = asyncio.Event()
    reload = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, reload.set)
    runtime = RuntimeClient(_socket_path(options.runtime_socket))
    node = prepare(options, runtime)
    if node is None:
        runtime.close()
        return 1
    enforcer, store, lock, metrics, start = (
        node.enforcer,
        node.store,
        node.lock,
        node.metrics,
        node.start,
    )

    runtime_socket = _socket_path(options.runtime_socket)
    image_socket = _socket_path(options.image_socket or options.runtime_socket)
    relay_socket = _socket_path(options.relay_socket)
    service = CRIService(enforcer)
    tasks = restore_or_take_over(node, service)
    await asyncio.sleep(0)  # submitted to the worker before the relay accepts a call

    def route(path: str) -> str:
        return image_socket if path.startswith(IMAGE_SERVICE) else runtime_socket

    server = await serve_relay(
        relay_socket,
        route,
        service.intercepts(),
        observer=metrics.observe_call,
        taps=service.taps(),
    )
    log.info(
        "relaying %s -> runtime %s, images %s; policy %s (configuration: %s)",
        relay_socket,
        runtime_socket,
        image_socket,
        enforcer.config.policy.name,
        start.source,
    )
    metrics_server = MetricsEndpoint(metrics_address(node), metrics, server)
    metrics_server.start()
    health = HealthFile(options.health_file)
    heartbeat = asyncio.create_task(
        health.keep(
            lambda: (
                lock.fd is not None
                and server.listening
                and not stop.is_set()
                and store.problem is None
            )
        )
    )

    # The quantity parser's import (~0.4 s) is paid on the worker now, once the relay serves,
    # rather than by the first CreateContainer.
    tasks.append(asyncio.ensure_future(service.run(parse_quantity, "1")))
    tasks.append(
        asyncio.create_task(_reconcile_until_done(service, enforcer, store, stop, metrics_server))
    )
    tasks.append(asyncio.create_task(service.maintain_forever()))
    # The gauges by pool and NUMA node, and the NodeResourceTopology: after decisions, off
    # the calls' path.
    watch = UsageWatch(enforcer, service.run, metrics, topology_writer(options))
    tasks.append(asyncio.create_task(watch.run()))
    manager, source = start_configuration(node, service, reload, tasks)
    dra = start_dra(options, enforcer, service, tasks)
    succeeded = asyncio.Event()
    watcher = asyncio.create_task(_watch_for_successor(server, succeeded))
    stopped = asyncio.create_task(stop.wait())
    await asyncio.wait(
        [stopped, asyncio.create_task(succeeded.wait())], return_when=asyncio.FIRST_COMPLETED
    )
    watcher.cancel()
    handed_over = succeeded.is_set() and not stop.is_set()
    if handed_over:
        log.info("a newer enforcer listens on %s: handing over to it", relay_socket)
    else:
        log.info("stopping: finishing calls in flight (for up to %gs)", options.grace_period)
    manager.closed = True  # no configuration is applied from here on
    for task in tasks:
        task.cancel()
    dra.stop()
    lock.abandon()  # when still waiting to take over: stop waiting
    if source is not None:
        await asyncio.to_thread(source.stop)
    await server.close(options.grace_period)
    # Frequencies and C-states back as they were (the successor of a hand-over keeps them).
    await save_at_stop(service, enforcer, timeout=None, restore_node=not handed_over)
    lock.release()
    metrics_server.close()
    if handed_over:
        log.info("handed over; state saved in %s; idle until stopped", options.state_dir)
        await stop.wait()  # exiting now would make kubelet restart us, and take it back
    elif options.fallback_link and (lock.held_once or store.lock_pending):
        # Only an enforcer that was in charge: one that never took over leaves the path to
        # whoever is (or the next one).
        handover.leave_fallback_link(relay_socket, runtime_socket)
    service.close()
    runtime.close()
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


async def _watch_for_successor(server: RelayServer, succeeded: asyncio.Event) -> None:
    own = server.socket_inode
    while not handover.successor_listening(server.socket_path, own):
        await asyncio.sleep(SUCCESSOR_POLL_SECONDS)
    succeeded.set()


async def _reconcile_until_done(
    service: CRIService,
    enforcer: Enforcer,
    store: StateStore,
    stop: asyncio.Event,
    health: MetricsEndpoint,
) -> None:
    """The runtime may start after us (or be restarting): retry until it answers. A saved
    state that cannot be read is read again first: reconciling without it would decide blind.
    /healthz says not ready while the last attempt failed."""

    while not stop.is_set():
        try:
            if await service.run(reconcile_once, enforcer, store):
                health.reconcile_failed = None
                return
        except RuntimeAway as exc:
            health.reconcile_failed = str(exc)
            log.warning(
                "cannot reconcile with the runtime yet (%s); retrying in %.0fs",
                exc,
                RECONCILE_RETRY_SECONDS,
            )
        except StateWriteFailed:
            pass  # rolled back; the store has said why, once: retried until a write works
        await asyncio.sleep(RECONCILE_RETRY_SECONDS)


def serve(options: RunOptions) -> int:
    """`run` on uvloop's event loop (libuv): the relay's per-call cost, mostly the loop's own
    work moving bytes between two sockets, is lower there than on asyncio's."""
    return on_uvloop(run(options))


def on_uvloop(main: Coroutine[Any, Any, int]) -> int:
    """Runs a daemon's main coroutine on uvloop (both modes: `run` and `nri`)."""
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)
