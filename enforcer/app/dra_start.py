"""Starting the DRA driver beside either transport (`run` and `nri`): one call, `start_dra`.

When `dra.enabled` is set at start (and a node name and API credentials are at hand: the driver
reads claims and writes ResourceSlices), the kubelet plugin's two sockets are served under
`--kubelet-dir`, and a task keeps the node's ResourceSlices equal to the devices offered now:
re-published after every change of placements (our own exclusive CPUs come and go), of the
configuration (`dra.mode`, reserved or available CPUs) and, being read each round, of anything
else the devices are computed from. Stopped by `DRAHandle.stop`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from enforcer.cluster.client import in_cluster, make_api_client
from enforcer.dra.cpu_details import read_cpu_details
from enforcer.dra.driver import DRADriver
from enforcer.dra.kubelet_plugin import KubeletPlugin
from enforcer.dra.slices import ClusterDRA, SliceWriteError
from enforcer.engine import Enforcer
from enforcer.options import RunOptions
from enforcer.worker import EngineWorker

log = logging.getLogger("enforcer")

POLL_SECONDS = 1.0
RETRY_SECONDS = 10.0
WORKER_TIMEOUT = 60.0  # a prepare waits this long for the worker, then fails (kubelet retries)


@dataclass
class DRAHandle:
    plugin: KubeletPlugin
    driver: DRADriver
    cluster: ClusterDRA
    tasks: list[asyncio.Future[Any]] = field(default_factory=list)

    def stop(self) -> None:
        """Stops serving kubelet; the slices stay (kubelet wipes them if we do not return)."""
        for task in self.tasks:
            task.cancel()
        self.plugin.stop()


def start_dra(
    options: RunOptions, enforcer: Enforcer, worker: EngineWorker, tasks: list[asyncio.Future[Any]]
) -> DRAHandle | None:
    """The driver started, or None (logged why) when it is off or cannot run here."""
    if not enforcer.config.dra.enabled:
        return None
    if not options.node_name or not (options.kubeconfig or in_cluster()):
        log.error(
            "dra.enabled: the DRA driver needs --node-name and API credentials (--kubeconfig or "
            "a pod's service account) to read claims and publish ResourceSlices; not started"
        )
        return None
    loop = asyncio.get_running_loop()

    def on_worker(fn: Callable[[], Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(worker.run(fn), loop).result(WORKER_TIMEOUT)

    cluster = ClusterDRA(lambda: make_api_client(options.kubeconfig), options.node_name)
    driver = DRADriver(
        enforcer,
        node_name=options.node_name,
        read_claim=cluster.read_claim,
        on_worker=on_worker,
        cdi_dir=options.cdi_dir,
        details=read_cpu_details(enforcer.topology, options.sysfs_root),
    )
    plugin = KubeletPlugin(options.kubelet_dir, driver)
    try:
        plugin.start()
    except (OSError, RuntimeError) as exc:
        log.error("the DRA driver cannot serve kubelet under %s: %s", options.kubelet_dir, exc)
        plugin.stop()
        return None
    handle = DRAHandle(plugin, driver, cluster)
    handle.tasks.append(asyncio.create_task(_publish_forever(driver, cluster, worker)))
    tasks.extend(handle.tasks)
    return handle


async def _publish_forever(driver: DRADriver, cluster: ClusterDRA, worker: EngineWorker) -> None:
    last_error = ""
    while True:
        try:
            devices = await worker.run(driver.devices)
            await asyncio.to_thread(cluster.publish, devices)
            last_error = ""
            await asyncio.sleep(POLL_SECONDS)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the API server away, a refusal: said once, retried
            text = str(exc) if isinstance(exc, SliceWriteError) else repr(exc)
            if text != last_error:
                log.error("publishing the DRA ResourceSlices failed (retrying): %s", text)
                last_error = text
            await asyncio.sleep(RETRY_SECONDS)
