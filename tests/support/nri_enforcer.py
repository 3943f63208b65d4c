"""`resource-enforcer nri` as a child process, registered with a private containerd 1.7."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from enforcer.topology import CPUSet
from tests.support.enforcer_process import EnforcerError, EnforcerProcess, console_script
from tests.support.kubelet import RunningPod
from tests.support.slow import scaled

SYNCHRONIZED = "synchronizing with"
# Runtimes of the matrix whose NRI (v0.12) calls a method per event instead of StateChange.
PER_EVENT_RELEASES = ("containerd2.4",)
# Each such method by the StateChange event it stands for.
PER_EVENT_METHOD = {
    "RUN_POD_SANDBOX": "RunPodSandbox",
    "STOP_POD_SANDBOX": "StopPodSandbox",
    "REMOVE_POD_SANDBOX": "RemovePodSandbox",
    "POST_CREATE_CONTAINER": "PostCreateContainer",
    "START_CONTAINER": "StartContainer",
    "POST_START_CONTAINER": "PostStartContainer",
    "POST_UPDATE_CONTAINER": "PostUpdateContainer",
    "REMOVE_CONTAINER": "RemoveContainer",
}


class NriEnforcerProcess(EnforcerProcess):
    """Started like `EnforcerProcess`, as an NRI plugin on ``nri_socket``; ready once the
    runtime has synchronized it (its log says so)."""

    def __init__(
        self,
        workdir: str | os.PathLike[str],
        *,
        nri_socket: str,
        config: str | None = None,
        extra_args: list[str] | None = None,
        metrics_address: str | None = "",
        plugin_name: str = "resource-enforcer",
    ) -> None:
        super().__init__(
            workdir,
            runtime_socket="",
            config=config,
            extra_args=extra_args,
            metrics_address=metrics_address,
        )
        self.nri_socket = nri_socket
        self.plugin_name = plugin_name
        self._log_offset = 0

    def command(self) -> list[str]:
        cmd = [
            console_script("resource-enforcer"),
            "nri",
            "--nri-socket",
            self.nri_socket,
            "--plugin-name",
            self.plugin_name,
            "--state-dir",
            self.state_dir,
            "--log-level",
            "debug",
        ]
        if self.metrics_address is not None:
            cmd += ["--metrics-address", self.metrics_address]
        if self.config:
            cmd += ["--config", self.config]
        return cmd + self.extra_args

    def start(self, timeout: float = 20.0, *, wait: bool = True) -> NriEnforcerProcess:
        self._log_offset = self._log_size()
        super().start(timeout, wait=wait)
        return self

    def _log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def log_since_start(self) -> str:
        """What this process (the last one started) logged so far."""
        try:
            return self.log_path.read_bytes()[self._log_offset :].decode(errors="replace")
        except OSError:
            return ""

    def synchronizations(self) -> int:
        """How many times the runtime synchronized this process so far."""
        return self.log_since_start().count(SYNCHRONIZED)

    def wait_ready(self, timeout: float = 20.0, count: int = 1) -> None:
        """Until the runtime has synchronized this process ``count`` times."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise EnforcerError(
                    f"resource-enforcer nri exited with {self.proc.returncode}:\n{self.log_tail()}"
                )
            if self.synchronizations() >= count:
                time.sleep(0.1)  # the Synchronize answer is on its way
                return
            time.sleep(0.05)
        raise EnforcerError(f"not synchronized by the runtime after {timeout}s:\n{self.log_tail()}")


# -- checks shared by the NRI plugin's real-runtime modules ------------------------------------


def cpus_of(pod: RunningPod) -> CPUSet:
    """The cpuset of the pod's container "app", read from its real cgroup."""
    return CPUSet.parse(Path(pod.cgroup_path("cpuset", "app"), "cpuset.cpus").read_text())


def wait_for(
    predicate: Callable[[], object], timeout: float = 30.0, why: Callable[[], str] = lambda: ""
) -> None:
    """Polls predicate until it holds; AssertionError with why() when it does not in time."""
    deadline = time.monotonic() + scaled(timeout)
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met in time\n{why()}")
        time.sleep(0.1)


def health(path: Path) -> str:
    """The plugin's health word, or "" while there is no health file."""
    try:
        return path.read_text().strip()
    except OSError:
        return ""
