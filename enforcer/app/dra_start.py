"""Serving the DRA driver beside either transport (`run` and `nri`): `serve_dra`, one of the
services started with the daemon (enforcer.app.daemon).

A task follows the live configuration: while `dra.enabled` is set (and a node name and API
credentials are at hand: the driver reads claims and writes ResourceSlices), the kubelet
plugin's two sockets are served under `--kubelet-dir`, and the node's ResourceSlices are kept
equal to the devices offered now: re-published after every change of placements (our own
exclusive CPUs come and go), of the configuration (`dra.mode`, reserved or available CPUs)
and of the hardware (the CPUs online, `<sysfs>/devices/system/cpu/online` read again every
round), the devices being computed again every round. When `dra.enabled` is turned off the
sockets go and the slices are withdrawn; prepared claims stay held until kubelet unprepares
them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from enforcer.cluster.client import in_cluster, make_api_client
from enforcer.dra.cpu_details import read_cpu_details
from enforcer.dra.driver import DRADriver
from enforcer.dra.kubelet_plugin import KubeletPlugin
from enforcer.dra.slices import ClusterDRA, SliceWriteError
from enforcer.engine import Enforcer
from enforcer.options import RunOptions
from enforcer.sysfs import read_online_cpus
from enforcer.topology import CPUSet, TopologyError
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
    _said: str = ""
    _online_said: str = ""

    def stop(self) -> None:
        """Stops serving kubelet; the slices stay (kubelet wipes them if we do not return)."""
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

    def read_online(self) -> CPUSet | None:
        """The CPUs online now, handed to the driver; a change is logged, a CPU the enforcer
        did not know at start named once, a file that cannot be read said once (the last
        reading stays)."""
        driver = self.driver
        if driver is None:
            return None
        try:
            online = read_online_cpus(self.options.sysfs_root)
        except TopologyError as exc:
            self._say_online(f"the DRA driver keeps the CPUs online it last read: {exc}")
            return driver.online
        before = driver.online if driver.online is not None else self.enforcer.topology.online
        if online != before:
            log.info("online CPUs now %s (were %s): DRA devices published again", online, before)
            unknown = online - self.enforcer.topology.online
            if unknown:
                self._say_online(
                    f"CPUs {unknown} came online after the enforcer started: not offered to "
                    "DRA claims (nor placed by the policy) until the enforcer restarts"
                )
        driver.online = online
        return online

    def _say_online(self, text: str) -> None:
        if text != self._online_said:
            log.warning("%s", text)
            self._online_said = text

    async def publish(self) -> bool:
        """One round: the CPUs online read again, the devices computed on the worker, the
        slices made to hold them; whether anything was written (SliceWriteError and the
        client's errors go to the caller)."""
        assert self.driver is not None and self.cluster is not None
        self.read_online()
        devices = await self.worker.run(self.driver.devices)
        written: bool = await asyncio.to_thread(self.cluster.publish, devices)
        return written

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
                    await self.publish()
                    self._said = ""
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # the API server away, a refusal: said once, retried
                    why = str(exc) if isinstance(exc, SliceWriteError) else repr(exc)
                    self._say(f"publishing the DRA ResourceSlices failed (retrying): {why}")
                    await asyncio.sleep(RETRY_SECONDS)
                    continue
            await asyncio.sleep(POLL_SECONDS)


async def serve_dra(options: RunOptions, enforcer: Enforcer, worker: EngineWorker) -> None:
    """The driver, following `dra.enabled` in the live configuration, until cancelled at the
    daemon's stop (then kubelet is no longer served; the slices stay)."""
    handle = DRAHandle(options, enforcer, worker)
    try:
        await handle.run()
    finally:
        handle.stop()
