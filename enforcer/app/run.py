"""`resource-enforcer run`: the relay as the transport of the daemon's sequence (``daemon``).

Runs until SIGTERM or SIGINT, or until a newer enforcer listens on the relay socket (a
hand-over: the state is saved for it and this process idles until stopped). The relay comes
first and never waits for anything else: kubelet reaches the runtime only through it. The
runtime may come later (reconciliation retries), the API server later still, or never (the
configuration then comes from the state folder or the --config file).
"""

from __future__ import annotations

import asyncio
import logging

from enforcer import handover
from enforcer.app.daemon import Background, Transport, on_uvloop, run_daemon
from enforcer.app.health import SERVING, STANDBY
from enforcer.app.metrics_endpoint import MetricsEndpoint, Serving
from enforcer.app.node import Node, reconcile_once
from enforcer.cri.runtime import CriRuntime
from enforcer.engine import Enforcer, StateWriteFailed
from enforcer.engine.ports import RuntimeAway
from enforcer.options import RunOptions
from enforcer.relay.h2 import RelayServer, serve_relay
from enforcer.relay.service import CRIService
from enforcer.state import StateStore
from enforcer.worker import EngineWorker

log = logging.getLogger("enforcer")

IMAGE_SERVICE = "/runtime.v1.ImageService/"
RECONCILE_RETRY_SECONDS = 2.0
SUCCESSOR_POLL_SECONDS = 0.5


def _socket_path(value: str) -> str:
    return value.removeprefix("unix://")


class RelayTransport(Transport):
    """The CRI relay in front of the runtime's sockets, and its hand-over to a newer enforcer."""

    name = "relay"

    def __init__(self, options: RunOptions) -> None:
        self.options = options
        self.runtime_socket = _socket_path(options.runtime_socket)
        self.image_socket = _socket_path(options.image_socket or options.runtime_socket)
        self.relay_socket = _socket_path(options.relay_socket)
        self.runtime = self.client = CriRuntime(self.runtime_socket)
        self.service: CRIService | None = None
        self.server: RelayServer | None = None
        self.handed_over = False

    def worker(self, node: Node) -> EngineWorker:
        self.service = CRIService(EngineWorker(node.enforcer))
        return self.service.worker

    async def start(self, node: Node) -> Serving:
        service = self.service
        assert service is not None

        def route(path: str) -> str:
            return self.image_socket if path.startswith(IMAGE_SERVICE) else self.runtime_socket

        self.server = await serve_relay(
            self.relay_socket,
            route,
            service.intercepts(),
            observer=node.metrics.observe_call,
            taps=service.taps(),
        )
        log.info(
            "relaying %s -> runtime %s, images %s; policy %s (configuration: %s)",
            self.relay_socket,
            self.runtime_socket,
            self.image_socket,
            node.enforcer.config.policy.name,
            node.start.source,
        )
        return self.server

    def health_word(self, node: Node, stop: asyncio.Event) -> str:
        server = self.server
        in_charge = (
            node.lock.fd is not None
            and server is not None
            and server.listening
            and not stop.is_set()
            and node.store.problem is None
        )
        return SERVING if in_charge else STANDBY

    def background(
        self, node: Node, endpoint: MetricsEndpoint, stop: asyncio.Event
    ) -> list[Background]:
        assert self.service is not None
        return [_reconcile_until_done(self.service, node.enforcer, node.store, stop, endpoint)]

    async def serve(self, stop: asyncio.Event) -> None:
        server = self.server
        assert server is not None
        succeeded = asyncio.Event()
        watcher = asyncio.create_task(_watch_for_successor(server, succeeded))
        stopped = asyncio.create_task(stop.wait())
        taken = asyncio.create_task(succeeded.wait())
        try:
            await asyncio.wait([stopped, taken], return_when=asyncio.FIRST_COMPLETED)
        finally:
            # A waiter left pending is collected later, still pending: "Task was destroyed but
            # it is pending!" in the log at exit. The NRI session cancels its waiters alike.
            for task in (watcher, stopped, taken):
                task.cancel()
        self.handed_over = succeeded.is_set() and not stop.is_set()
        if self.handed_over:
            log.info("a newer enforcer listens on %s: handing over to it", self.relay_socket)
        else:
            log.info(
                "stopping: finishing calls in flight (for up to %gs)", self.options.grace_period
            )

    async def stop_serving(self, grace_period: float) -> None:
        if self.server is not None:
            await self.server.close(grace_period)

    @property
    def restores_node(self) -> bool:
        return not self.handed_over  # the successor keeps frequencies and C-states

    async def after_save(self, node: Node, stop: asyncio.Event) -> None:
        if self.handed_over:
            log.info("handed over; state saved in %s; idle until stopped", self.options.state_dir)
            await stop.wait()  # exiting now would make kubelet restart us, and take it back
        elif self.options.fallback_link and (node.lock.held_once or node.store.lock_pending):
            # Only an enforcer that was in charge: one that never took over leaves the path to
            # whoever is (or the next one).
            handover.leave_fallback_link(self.relay_socket, self.runtime_socket)

    def close(self) -> None:
        if self.service is not None:
            self.service.worker.close()
        self.client.close()


async def run(options: RunOptions) -> int:
    return await run_daemon(options, RelayTransport(options))


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
            if await service.worker.run(reconcile_once, enforcer, store):
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
        except Exception as exc:  # a bug: logged whole and retried, as the NRI plugin does
            # Left to end the task, every create after it would be refused for ever ("has
            # not yet read the runtime") while the process looked alive.
            health.reconcile_failed = str(exc) or type(exc).__name__
            log.exception("reconciling with the runtime failed; retrying")
        await asyncio.sleep(RECONCILE_RETRY_SECONDS)


def serve(options: RunOptions) -> int:
    """`run` on uvloop's event loop (libuv): the relay's per-call cost, mostly the loop's own
    work moving bytes between two sockets, is lower there than on asyncio's."""
    return on_uvloop(run(options))
