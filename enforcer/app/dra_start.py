"""Starting the DRA driver beside either transport (`run` and `nri`): one call, `start_dra`.

A task follows the live configuration: while `dra.enabled` is set (and a node name and API
credentials are at hand: the driver reads claims and writes ResourceSlices), the kubelet
plugin's two sockets are served under `--kubelet-dir`, and the node's ResourceSlices are kept
equal to the devices offered now: re-published after every change of placements (our own
exclusive CPUs come and go) and of the configuration (`dra.mode`, reserved or available CPUs),
the devices being computed again every round. When `dra.enabled` is turned off the sockets go
and the slices are withdrawn; prepared claims stay held until kubelet unprepares them.
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
    options: RunOptions
    enforcer: Enforcer
    worker: EngineWorker
    plugin: KubeletPlugin | None = None
    driver: DRADriver | None = None
    cluster: ClusterDRA | None = None
    tasks: list[asyncio.Future[Any]] = field(default_factory=list)
    _said: str = ""

    def stop(self) -> None:
        """Stops serving kubelet; the slices stay (kubelet wipes them if we do not return)."""
        for task in self.tasks:
            task.cancel()
        if self.plugin is not None:
            self.plugin.stop()
            self.plugin = None

    def _say(self, text: str) -> None:
        if text != self._said:
            log.error("%s", text)
            self._said = text

    def _start(self) -> bool:
        options, enforcer = self.options, self.enforcer
        if not options.node_name or not (options.kubeconfig or in_cluster()):
            self._say(
                "dra.enabled: the DRA driver needs --node-name and API credentials "
                "(--kubeconfig or a pod's service account) to read claims and publish "
                "ResourceSlices; not started"
            )
            return False
        loop = asyncio.get_running_loop()
        worker = self.worker

        def on_worker(fn: Callable[[], Any]) -> Any:
            return asyncio.run_coroutine_threadsafe(worker.run(fn), loop).result(WORKER_TIMEOUT)

        self.cluster = ClusterDRA(lambda: make_api_client(options.kubeconfig), options.node_name)
        self.driver = DRADriver(
            enforcer,
            node_name=options.node_name,
            read_claim=self.cluster.read_claim,
            on_worker=on_worker,
            cdi_dir=options.cdi_dir,
            details=read_cpu_details(enforcer.topology, options.sysfs_root),
        )
        plugin = KubeletPlugin(options.kubelet_dir, self.driver)
        try:
            plugin.start()
        except (OSError, RuntimeError) as exc:
            plugin.stop()
            self._say(f"the DRA driver cannot serve kubelet under {options.kubelet_dir}: {exc}")
            return False
        self.plugin = plugin
        self._said = ""
        return True

    async def run(self) -> None:
        while True:
            enabled = self.enforcer.config.dra.enabled
            if enabled and self.plugin is None and not self._start():
                await asyncio.sleep(RETRY_SECONDS)
                continue
            if not enabled and self.plugin is not None:
                self.plugin.stop()
                self.plugin = None
                if self.cluster is not None:
                    await asyncio.to_thread(self.cluster.withdraw)
                log.info("dra.enabled is off: the DRA driver stopped, its ResourceSlices withdrawn")
            if self.plugin is not None and self.driver is not None and self.cluster is not None:
                try:
                    devices = await self.worker.run(self.driver.devices)
                    await asyncio.to_thread(self.cluster.publish, devices)
                    self._said = ""
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # the API server away, a refusal: said once, retried
                    why = str(exc) if isinstance(exc, SliceWriteError) else repr(exc)
                    self._say(f"publishing the DRA ResourceSlices failed (retrying): {why}")
                    await asyncio.sleep(RETRY_SECONDS)
                    continue
            await asyncio.sleep(POLL_SECONDS)


def start_dra(
    options: RunOptions, enforcer: Enforcer, worker: EngineWorker, tasks: list[asyncio.Future[Any]]
) -> DRAHandle:
    """The driver's task, following `dra.enabled` in the live configuration."""
    handle = DRAHandle(options, enforcer, worker)
    handle.tasks.append(asyncio.create_task(handle.run()))
    tasks.extend(handle.tasks)
    return handle
