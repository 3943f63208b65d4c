"""`resource-enforcer run`: the relay with the enforcer behind it, until SIGTERM or SIGINT."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from pathlib import Path

import grpc

from enforcer.config import Config, ConfigError, load_config
from enforcer.controllers.blockio import BlockIOController
from enforcer.controllers.errors import ApplyError
from enforcer.controllers.rdt import RdtController
from enforcer.engine import Enforcer
from enforcer.engine.classes import ClassControllers
from enforcer.metrics import EnforcerMetrics, MetricsServer
from enforcer.options import RunOptions
from enforcer.relay.h2 import serve_relay
from enforcer.relay.service import CRIService
from enforcer.runtime import RuntimeClient
from enforcer.state import StateStore
from enforcer.topology import TopologyError, read_topology

log = logging.getLogger("enforcer")

IMAGE_SERVICE = "/runtime.v1.ImageService/"
RECONCILE_RETRY_SECONDS = 2.0
STOP_GRACE_SECONDS = 10.0


def _socket_path(value: str) -> str:
    return value.removeprefix("unix://")


async def run(options: RunOptions) -> int:
    try:
        config = load_config(options.config) if options.config else Config()
        topology = read_topology(options.sysfs_root)
        store = StateStore(options.state_dir)
        store.ensure_dir()
        runtime_socket = _socket_path(options.runtime_socket)
        image_socket = _socket_path(options.image_socket or options.runtime_socket)
        metrics = EnforcerMetrics()
        classes = ClassControllers(
            RdtController(options.resctrl_root),
            BlockIOController(options.cgroupfs_root, sysfs_root=options.sysfs_root),
            metrics,
            cgroupfs_root=options.cgroupfs_root,
        )
        classes.configure(config)
        enforcer = Enforcer(
            topology=topology,
            config=config,
            store=store,
            runtime=RuntimeClient(runtime_socket),
            metrics=metrics,
            classes=classes,
        )
        metrics_server = (
            MetricsServer(options.metrics_address, metrics).start()
            if options.metrics_address
            else None
        )
    except ConfigError as exc:
        for problem in exc.problems:
            log.error("configuration refused: %s", problem)
        return 1
    except (TopologyError, ApplyError, OSError) as exc:
        log.error("cannot start: %s", exc)
        return 1

    enforcer.restore_saved()
    service = CRIService(enforcer)

    def route(path: str) -> str:
        return image_socket if path.startswith(IMAGE_SERVICE) else runtime_socket

    server = await serve_relay(_socket_path(options.relay_socket), route, service.intercepts())
    log.info(
        "relaying %s -> runtime %s, images %s; policy %s",
        options.relay_socket,
        runtime_socket,
        image_socket,
        config.policy.name,
    )
    stop = asyncio.Event()
    reload = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, reload.set)
    tasks = [asyncio.create_task(_reconcile_until_done(service, enforcer, stop))]
    if options.config:
        watcher = ConfigWatcher(options.config, service, enforcer, reload)
        tasks.append(asyncio.create_task(watcher.run()))
    await stop.wait()
    log.info("stopping: finishing calls in flight")
    for task in tasks:
        task.cancel()
    await server.close(STOP_GRACE_SECONDS)
    await service.run(lambda: enforcer.persist(durable=True))
    service.close()
    enforcer.runtime.close()
    if metrics_server is not None:
        metrics_server.close()
    log.info("stopped; state saved in %s", Path(options.state_dir) / "state.json")
    return 0


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


class ConfigWatcher:
    """Reloads the configuration file when it changes or on SIGHUP.

    A refused configuration is logged with its reasons and the last good one stays in force.
    """

    POLL_SECONDS = 1.0

    def __init__(
        self, path: str, service: CRIService, enforcer: Enforcer, signalled: asyncio.Event
    ) -> None:
        self.path = path
        self.service = service
        self.enforcer = enforcer
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
            await self.reload()

    async def reload(self) -> bool:
        metrics = self.enforcer.metrics
        try:
            config = load_config(self.path)
            moved = await self.service.run(self.enforcer.reconfigure, config)
        except ConfigError as exc:
            for problem in exc.problems:
                log.error(
                    "configuration %s refused, keeping the last good one: %s", self.path, problem
                )
            metrics.reloads.labels("refused").inc()
            return False
        except ApplyError as exc:
            log.error("configuration %s could not be applied: %s", self.path, exc)
            metrics.reloads.labels("failed").inc()
            metrics.controller_errors.labels("rdt").inc()
            return False
        metrics.reloads.labels("applied").inc()
        log.info(
            "configuration %s applied (%d containers moved to the shared pool)",
            self.path,
            len(moved),
        )
        return True
