"""What both daemons set up before they serve: the machine, the state folder and its lock, the
configuration and the engine over the transport's runtime port (``prepare``), then the saved
state, the take-over and the live configuration (``restore_or_take_over``,
``start_configuration``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from enforcer import handover
from enforcer.app.cluster_source import ClusterSettings, cluster_settings, start_cluster_source
from enforcer.app.config_precedence import ConfigManager, Start, starting_configs
from enforcer.app.errors import StartError
from enforcer.app.kubelet_cpu_manager import check_kubelet_cpu_manager
from enforcer.app.owned_state import OwnedStateStore
from enforcer.app.watch import ConfigWatcher
from enforcer.cluster import LastGoodStore
from enforcer.cluster.client import in_cluster, make_api_client
from enforcer.cluster.config_source import ClusterConfigSource
from enforcer.controllers.base import Roots
from enforcer.controllers.cpuset import CpusetReader
from enforcer.controllers.errors import ApplyError
from enforcer.controllers.registry import node_controllers
from enforcer.engine import Enforcer
from enforcer.engine.ports import Runtime
from enforcer.metrics import EnforcerMetrics
from enforcer.options import RunOptions
from enforcer.podresources import PodResourcesClient, socket_path
from enforcer.podresources.slices import SliceNodes
from enforcer.state import StateStore
from enforcer.sysfs import read_topology
from enforcer.topology import Topology, TopologyError
from enforcer.worker import EngineWorker
from resource_contract.config import ConfigError, is_host_port

log = logging.getLogger("enforcer")


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
    cpuset_reader: Callable[[CpusetReader], CpusetReader] | None = None,
) -> Enforcer:
    controllers = node_controllers(
        Roots(
            cgroupfs=options.cgroupfs_root, sysfs=options.sysfs_root, resctrl=options.resctrl_root
        ),
        topology,
        cpuset_reader,
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
        devices=device_source(options),
    )


def device_source(options: RunOptions) -> PodResourcesClient:
    """kubelet's pod-resources API, asked only under policy.preferCloseToDevices; DRA devices'
    NUMA nodes from their ResourceSlices where the enforcer can reach the API server."""
    node_of = None
    if options.node_name and (options.kubeconfig or in_cluster()):
        node_of = SliceNodes(lambda: make_api_client(options.kubeconfig), options.node_name)
    return PodResourcesClient(socket_path(options.kubelet_dir), node_of=node_of)


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


def prepare(
    options: RunOptions,
    runtime: Runtime,
    cpuset_reader: Callable[[CpusetReader], CpusetReader] | None = None,
) -> Node | None:
    """Reads the machine, the state folder and the configuration and builds the engine over
    the transport's runtime port and reader of cpusets; None (after logging why) when the
    enforcer cannot start."""
    try:
        if options.metrics_address is not None:
            _check_address(options.metrics_address)
        check_kubelet_cpu_manager(options.kubelet_dir)
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
                enforcer = build_enforcer(
                    options, topology, store, metrics, start, runtime, cpuset_reader
                )
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
