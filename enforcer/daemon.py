"""`resource-enforcer run`: the relay with the enforcer behind it, until SIGTERM or SIGINT.

The relay comes first and never waits for anything else: kubelet reaches the runtime only
through it. The runtime may come later (reconciliation retries), the API server later still,
or never (the configuration then comes from the state folder or the --config file).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import errno
import logging
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
import yaml

from enforcer import handover
from enforcer.cluster import CONFIG_KEY, LastGoodStore, StoredConfig
from enforcer.cluster.client import in_cluster
from enforcer.configuration import load_config, parse_config
from enforcer.controllers.blockio import BlockIOController
from enforcer.controllers.errors import ApplyError
from enforcer.controllers.rdt import RdtController
from enforcer.engine import Enforcer
from enforcer.engine.classes import ClassControllers
from enforcer.metrics import EnforcerMetrics, MetricsServer
from enforcer.options import RunOptions
from enforcer.relay.h2 import RelayServer, serve_relay
from enforcer.relay.service import CRIService
from enforcer.runtime import RuntimeClient
from enforcer.state import StateStore
from enforcer.topology import Topology, TopologyError, read_topology
from resource_contract.config import Config, ConfigError
from resource_contract.quantities import parse_quantity

if TYPE_CHECKING:  # the cluster code imports `kubernetes`, slow to import, in its thread
    from enforcer.cluster.config_source import ClusterConfig, ClusterConfigSource, Outcome

log = logging.getLogger("enforcer")

HEALTH_SECONDS = 5.0
IMAGE_SERVICE = "/runtime.v1.ImageService/"
RECONCILE_RETRY_SECONDS = 2.0
STOP_GRACE_SECONDS = 10.0
METRICS_RETRY_SECONDS = 2.0
SUCCESSOR_POLL_SECONDS = 0.5
BUILTIN = "builtin"


class StartError(Exception):
    pass


def _socket_path(value: str) -> str:
    return value.removeprefix("unix://")


def _check_address(address: str) -> None:
    _host, sep, port = address.rpartition(":")
    if address and not (sep and port.isdigit() and int(port) < 65536):
        raise StartError(f"--metrics-address {address!r} is not HOST:PORT")


class OwnedStateStore(StateStore):
    """Writes only while this process holds the state folder's lock: a newcomer waiting to
    take over, or an enforcer that handed over, never overwrites the owner's state."""

    def __init__(self, state_dir: str, lock: handover.StateLock) -> None:
        super().__init__(state_dir)
        self.lock = lock

    def save(self, data: dict[str, Any], *, durable: bool = True) -> None:
        if self.lock.fd is None:
            log.debug("not saving the state: another enforcer owns %s", self.dir)
            return
        super().save(data, durable=durable)


@dataclass(frozen=True)
class ClusterSettings:
    node: str
    namespace: str
    kubeconfig: str | None


def cluster_settings(options: RunOptions) -> ClusterSettings | None:
    """Whether the configuration comes from the cluster, and for which node."""
    if options.cluster_config == "off":
        return None
    credentials = bool(options.kubeconfig) or in_cluster()
    if options.cluster_config == "on":
        if not options.node_name:
            raise StartError("--cluster-config on needs --node-name (or $NODE_NAME)")
        if not credentials:
            raise StartError("--cluster-config on needs --kubeconfig or a pod's service account")
    elif not (options.node_name and credentials):
        log.info(
            "configuration from the cluster is off (auto: %s)",
            "no node name" if not options.node_name else "no API credentials",
        )
        return None
    assert options.node_name is not None
    return ClusterSettings(options.node_name, options.namespace, options.kubeconfig)


def config_from_text(text: str, source: str) -> Config:
    """A ConfigMap's config.yaml, validated exactly as the --config file is."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError([f"{source}: not valid YAML: {exc}"]) from None
    return parse_config(data)


@dataclass
class Start:
    """The configuration the enforcer starts with, and where it came from."""

    config: Config
    source: str  # configmap/<ns>/<name> (stored), file:<path>, builtin
    text: str | None = None  # the stored ConfigMap's text


def starting_configs(options: RunOptions, last_good: LastGoodStore | None) -> list[Start]:
    """In order of preference: the cluster's last word (stored), the --config file, built-in
    defaults. A refused file is fatal, as it has always been; a refused stored one is not."""
    starts: list[Start] = []
    stored = last_good.load() if last_good is not None else None
    if stored is not None:
        try:
            config = config_from_text(stored.text, stored.source)
            starts.append(Start(config, stored.source, stored.text))
        except ConfigError as exc:
            log.error("stored configuration from %s refused: %s", stored.source, exc)
    if options.config:
        try:
            starts.append(Start(load_config(options.config), f"file:{options.config}"))
        except ConfigError:
            if not starts:
                raise
            log.warning(
                "--config %s is refused; starting from the stored configuration", options.config
            )
    else:
        starts.append(Start(Config(), BUILTIN))
    return starts


def build_enforcer(
    options: RunOptions,
    topology: Topology,
    store: StateStore,
    metrics: EnforcerMetrics,
    start: Start,
) -> Enforcer:
    classes = ClassControllers(
        RdtController(options.resctrl_root),
        BlockIOController(options.cgroupfs_root, sysfs_root=options.sysfs_root),
        metrics,
        cgroupfs_root=options.cgroupfs_root,
    )
    classes.configure(start.config)
    return Enforcer(
        topology=topology,
        config=start.config,
        store=store,
        runtime=RuntimeClient(_socket_path(options.runtime_socket)),
        metrics=metrics,
        classes=classes,
    )


async def run(options: RunOptions) -> int:
    # Signals are ours from the first moment: a stop asked for during start-up is honoured
    # once serving (never a half-started relay killed), a reload then finds nothing to do.
    stop = asyncio.Event()
    reload = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, reload.set)
    try:
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
                enforcer = build_enforcer(options, topology, store, metrics, start)
                break
            except (ConfigError, ApplyError) as exc:
                if i == len(starts) - 1:
                    raise
                log.error("configuration from %s does not fit this node: %s", start.source, exc)
        assert enforcer is not None
        first = lock.try_acquire()
    except StartError as exc:
        log.error("cannot start: %s", exc)
        return 1
    except ConfigError as exc:
        for problem in exc.problems:
            log.error("configuration refused: %s", problem)
        return 1
    except (TopologyError, ApplyError, OSError) as exc:
        log.error("cannot start: %s", exc)
        return 1

    runtime_socket = _socket_path(options.runtime_socket)
    image_socket = _socket_path(options.image_socket or options.runtime_socket)
    relay_socket = _socket_path(options.relay_socket)
    service = CRIService(enforcer)
    tasks: list[asyncio.Future[Any]] = []
    if first:
        enforcer.restore_saved()
    else:
        # Another enforcer runs on this node (a DaemonSet update): our intercepted calls
        # queue on the worker behind taking over its state, which it hands over once it sees
        # our socket.
        log.info("enforcer pid %s runs on this node; taking over from it", lock.holder())

        def take_over() -> None:
            try:
                if lock.acquire():
                    enforcer.restore_saved()
                    log.info("took over the state in %s", options.state_dir)
                    return
            except Exception:
                log.exception("taking over the state in %s failed", options.state_dir)
            # Without the state, no decision of this process could be right: the calls queued
            # behind the take-over (and any later) are refused, for kubelet to retry.
            enforcer.not_in_charge = "the enforcer is stopping before it took over the node"

        tasks.append(asyncio.ensure_future(service.run(take_over)))
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
    metrics_server = MetricsEndpoint(options.metrics_address, metrics, server)
    metrics_server.start()
    health = HealthFile(options.health_file)
    heartbeat = asyncio.create_task(
        health.keep(lambda: lock.fd is not None and server.listening and not stop.is_set())
    )

    manager = ConfigManager(
        service,
        enforcer,
        file=options.config,
        last_good=last_good,
        source=start.source,
        text=start.text,
    )
    # The quantity parser's import (~0.4 s) is paid on the worker now, once the relay serves,
    # rather than by the first CreateContainer.
    tasks.append(asyncio.ensure_future(service.run(parse_quantity, "1")))
    tasks.append(asyncio.create_task(_reconcile_until_done(service, enforcer, stop)))
    tasks.append(asyncio.create_task(service.maintain_forever()))
    if options.config:
        tasks.append(asyncio.create_task(ConfigWatcher(options.config, manager, reload).run()))
    source = None
    if cluster is not None:
        source = start_cluster_source(cluster, manager, metrics)
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
        log.info("stopping: finishing calls in flight")
    manager.closed = True  # no configuration is applied from here on
    for task in tasks:
        task.cancel()
    lock.abandon()  # when still waiting to take over: stop waiting
    if source is not None:
        await asyncio.to_thread(source.stop)
    await server.close(STOP_GRACE_SECONDS)
    await service.run(lambda: enforcer.persist(durable=True))
    lock.release()
    metrics_server.close()
    if handed_over:
        log.info("handed over; state saved in %s; idle until stopped", options.state_dir)
        await stop.wait()  # exiting now would make kubelet restart us, and take it back
    elif options.fallback_link and lock.held_once:
        # Only an enforcer that was in charge: one that never took over leaves the path to
        # whoever is (or the next one).
        handover.leave_fallback_link(relay_socket, runtime_socket)
    service.close()
    enforcer.runtime.close()
    heartbeat.cancel()
    health.remove()
    log.info("stopped; state saved in %s", Path(options.state_dir) / "state.json")
    return 0


async def _watch_for_successor(server: RelayServer, succeeded: asyncio.Event) -> None:
    own = server.socket_inode
    while not handover.successor_listening(server.socket_path, own):
        await asyncio.sleep(SUCCESSOR_POLL_SECONDS)
    succeeded.set()


async def _reconcile_until_done(
    service: CRIService, enforcer: Enforcer, stop: asyncio.Event
) -> None:
    """The runtime may start after us (or be restarting): retry until it answers."""
    while not stop.is_set():
        try:
            await service.run(enforcer.reconcile)
            return
        except grpc.RpcError as exc:
            log.warning(
                "cannot reconcile with the runtime yet (%s); retrying in %.0fs",
                exc.details() if hasattr(exc, "details") else exc,
                RECONCILE_RETRY_SECONDS,
            )
        await asyncio.sleep(RECONCILE_RETRY_SECONDS)


class HealthFile:
    """Rewritten every few seconds: "serving" while `in_charge()`, else "standby"; removed at
    exit. Its age says the process is alive, its word whether it is the node's enforcer."""

    def __init__(self, path: str | None) -> None:
        self.path = Path(path) if path else None

    def write(self, word: str) -> None:
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(f".{self.path.name}.tmp")
            tmp.write_text(word + "\n")
            os.replace(tmp, self.path)

    async def keep(self, in_charge: Callable[[], bool]) -> None:
        if self.path is None:
            return
        while True:
            self.write("serving" if in_charge() else "standby")
            await asyncio.sleep(HEALTH_SECONDS)

    def remove(self) -> None:
        if self.path is not None:
            self.path.unlink(missing_ok=True)


class MetricsEndpoint:
    """/metrics and /healthz. The port may be taken for a moment (the enforcer this one takes
    over from still holds it, with hostNetwork): then binding is retried in the background,
    never holding up the relay."""

    def __init__(self, address: str, metrics: EnforcerMetrics, relay: RelayServer) -> None:
        self.address = address
        self.metrics = metrics
        self.relay = relay
        self.server: MetricsServer | None = None
        self._task: asyncio.Task[None] | None = None

    def healthy(self) -> bool:
        return self.relay.listening

    def _try(self) -> OSError | None:
        try:
            self.server = MetricsServer(self.address, self.metrics, self.healthy).start()
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


class ConfigManager:
    """The configuration in force, where it came from, and the one way to change it: validated
    (`parse_config`), then `Enforcer.reconfigure` on the enforcer's worker thread. A refused
    configuration changes nothing and the last good one stays in force.

    Precedence: a ConfigMap of the cluster (node, group, default) once the API server has
    answered; before that the one stored from the cluster last time; then the --config file;
    then built-in defaults (policy none). While a ConfigMap (or the stored one) is in force,
    changes to the --config file wait: they apply when the cluster has no ConfigMap for the
    node.
    """

    def __init__(
        self,
        service: CRIService,
        enforcer: Enforcer,
        *,
        file: str | None,
        last_good: LastGoodStore | None,
        source: str,
        text: str | None,
    ) -> None:
        self.service = service
        self.enforcer = enforcer
        self.file = file
        self.last_good = last_good
        self.source = source
        self.text = text
        self.loop = asyncio.get_running_loop()
        self.closed = False  # set when stopping or handing over
        self._lock = asyncio.Lock()  # one change at a time: file and cluster may race

    @property
    def metrics(self) -> EnforcerMetrics:
        return self.enforcer.metrics

    @property
    def cluster_in_force(self) -> bool:
        return self.source.startswith("configmap/")

    def _local(self) -> str:
        return f"file:{self.file}" if self.file else BUILTIN

    async def _reconfigure(self, config: Config, source: str) -> list[str]:
        """Applies ``config``; the problems when it was refused or failed (empty: applied)."""
        try:
            moved = await self.service.run(self.enforcer.reconfigure, config)
        except ConfigError as exc:
            for problem in exc.problems:
                log.error("configuration %s refused, keeping %s: %s", source, self.source, problem)
            self.metrics.reloads.labels("refused").inc()
            return list(exc.problems)
        except ApplyError as exc:
            log.error("configuration %s could not be applied: %s", source, exc)
            self.metrics.reloads.labels("failed").inc()
            self.metrics.controller_errors.labels("rdt").inc()
            return [str(exc)]
        except Exception as exc:  # reported like a refusal: a lost apply is never retried
            log.exception("configuration %s could not be applied", source)
            self.metrics.reloads.labels("failed").inc()
            return [f"could not be applied: {exc}"]
        self.metrics.reloads.labels("applied").inc()
        log.info("configuration %s applied (%d containers moved)", source, len(moved))
        return []

    def _refused(self, source: str, problems: list[str]) -> list[str]:
        for problem in problems:
            log.error("configuration %s refused, keeping %s: %s", source, self.source, problem)
        self.metrics.reloads.labels("refused").inc()
        return problems

    async def reload_file(self) -> bool:
        """The --config file changed (or SIGHUP)."""
        assert self.file is not None
        async with self._lock:
            if self.cluster_in_force:
                log.info("%s changed; not applied while %s is in force", self.file, self.source)
                return False
            source = f"file:{self.file}"
            try:
                config = load_config(self.file)
            except ConfigError as exc:
                self._refused(source, exc.problems)
                return False
            if await self._reconfigure(config, source):
                return False
            self.source, self.text = source, None
            return True

    async def apply_cluster(self, chosen: ClusterConfig | None) -> Outcome:
        from enforcer.cluster.config_source import Outcome

        async with self._lock:
            if chosen is None:
                # The API server says there is no ConfigMap for this node: back to local.
                if self.last_good is not None:
                    self.last_good.clear()
                source = self._local()
                if self.source == source:
                    return Outcome(True, [], source)
                try:
                    config = load_config(self.file) if self.file else Config()
                except ConfigError as exc:
                    return Outcome(False, self._refused(source, exc.problems), self.source)
                log.info("no ConfigMap for this node any more; falling back to %s", source)
            else:
                source = chosen.source
                if chosen.text is None:
                    problem = f"{chosen.source}: has no key {CONFIG_KEY}"
                    return Outcome(False, self._refused(source, [problem]), self.source)
                if self.cluster_in_force and chosen.text == self.text:
                    # Same configuration (e.g. the stored one, confirmed): nothing to redo.
                    self.source = source
                    self._store(chosen)
                    return Outcome(True, [], source)
                try:
                    config = config_from_text(chosen.text, source)
                except ConfigError as exc:
                    return Outcome(False, self._refused(source, exc.problems), self.source)
            problems = await self._reconfigure(config, source)
            if problems:
                return Outcome(False, problems, self.source)
            self.source = source
            self.text = chosen.text if chosen is not None else None
            if chosen is not None:
                self._store(chosen)
            return Outcome(True, [], source)

    def _store(self, chosen: ClusterConfig) -> None:
        if self.last_good is None or chosen.text is None:
            return
        try:
            self.last_good.save(StoredConfig(chosen.source, chosen.resource_version, chosen.text))
        except OSError as exc:
            log.error("cannot keep the configuration in %s: %s", self.last_good.path, exc)

    def apply_from_thread(
        self, chosen: ClusterConfig | None, stopped: Callable[[], bool]
    ) -> Outcome:
        """For the cluster thread: applies on the event loop and waits for the outcome. Never
        once this enforcer is stopping or has handed over: the state is not its own then."""
        if self.closed or stopped():
            raise RuntimeError("stopping")
        future = asyncio.run_coroutine_threadsafe(self.apply_cluster(chosen), self.loop)
        while True:
            try:
                return future.result(timeout=0.5)
            except concurrent.futures.TimeoutError:
                if stopped():
                    future.cancel()
                    raise RuntimeError("stopping") from None


def start_cluster_source(
    cluster: ClusterSettings, manager: ConfigManager, metrics: EnforcerMetrics
) -> ClusterConfigSource:
    from enforcer.cluster.client import make_api_client
    from enforcer.cluster.config_source import ClusterConfigSource

    source: ClusterConfigSource

    def apply(chosen: ClusterConfig | None) -> Outcome:
        return manager.apply_from_thread(chosen, lambda: source.stopped)

    source = ClusterConfigSource(
        api_client=lambda: make_api_client(cluster.kubeconfig),
        namespace=cluster.namespace,
        node=cluster.node,
        apply=apply,
        on_error=lambda: metrics.controller_errors.labels("cluster-config").inc(),
    )
    return source.start()


class ConfigWatcher:
    """Reloads the configuration file when it changes or on SIGHUP.

    A refused configuration is logged with its reasons and the last good one stays in force.
    """

    POLL_SECONDS = 1.0

    def __init__(self, path: str, manager: ConfigManager, signalled: asyncio.Event) -> None:
        self.path = path
        self.manager = manager
        self.signalled = signalled
        self.seen = self._fingerprint()

    def _fingerprint(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    async def run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.signalled.wait(), self.POLL_SECONDS)
            current = self._fingerprint()
            if not self.signalled.is_set() and current == self.seen:
                continue
            self.signalled.clear()
            self.seen = current
            await self.manager.reload_file()
