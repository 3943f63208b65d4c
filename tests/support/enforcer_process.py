"""`resource-enforcer run` as a child process, started the way users start it (console script).

Used by the end-to-end tests and by `make demo`.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import grpc

from enforcer.cri import api_pb2, api_pb2_grpc
from tests.support.slow import scaled


class EnforcerError(RuntimeError):
    pass


def console_script(name: str) -> str:
    """The installed console script next to this interpreter, else on PATH."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    if not found:
        raise EnforcerError(f"console script {name} is not installed (pip install -e .)")
    return found


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EnforcerProcess:
    def __init__(
        self,
        workdir: str | os.PathLike[str],
        *,
        runtime_socket: str,
        config: str | None = None,
        extra_args: list[str] | None = None,
        metrics_address: str | None = "",
    ) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.relay_socket = str(self.workdir / "relay" / "cri.sock")
        self.state_dir = str(self.workdir / "state")
        self.log_path = self.workdir / "enforcer.log"
        self.runtime_socket = runtime_socket
        self.config = config
        self.extra_args = extra_args or []
        # Empty: no metrics endpoint. "127.0.0.1:0" is not allowed (the port must be known):
        # use free_port(). None: no --metrics-address flag at all (the configuration's
        # metrics.address, else the default, applies).
        self.metrics_address = metrics_address
        self.proc: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        cmd = [
            console_script("resource-enforcer"),
            "run",
            "--runtime-socket",
            self.runtime_socket,
            "--relay-socket",
            self.relay_socket,
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

    def start(self, timeout: float = 20.0, *, wait: bool = True) -> EnforcerProcess:
        """Starts it; with `wait`, until a Version call through the relay answers (which
        needs the runtime)."""
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child keeps writing to it
        self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT)
        log.close()
        if wait:
            try:
                self.wait_ready(scaled(timeout))
            except BaseException:
                self.stop(signal.SIGKILL)  # never left running behind a failed start
                raise
        return self

    def wait_ready(self, timeout: float = 20.0) -> None:
        """Until a Version call through the relay answers."""
        deadline = time.monotonic() + timeout
        last = "no relay socket yet"
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise EnforcerError(
                    f"resource-enforcer exited with {self.proc.returncode}:\n{self.log_tail()}"
                )
            if os.path.exists(self.relay_socket):
                try:
                    with grpc.insecure_channel(f"unix://{self.relay_socket}") as channel:
                        api_pb2_grpc.RuntimeServiceStub(channel).Version(
                            api_pb2.VersionRequest(), timeout=2
                        )
                    return
                except grpc.RpcError as exc:
                    last = f"{exc.code()}: {exc.details()}"
            time.sleep(0.1)
        raise EnforcerError(f"relay not ready after {timeout}s ({last}):\n{self.log_tail()}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
        """Signals the enforcer and waits; returns its exit code."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(scaled(timeout))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self.proc = None
        return code

    @property
    def metrics_url(self) -> str:
        if not self.metrics_address:
            raise EnforcerError("started without --metrics-address")
        return f"http://{self.metrics_address}"

    def kill9(self) -> None:
        self.stop(signal.SIGKILL)

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def run_cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [console_script("resource-enforcer"), *args],
            capture_output=True,
            text=True,
            timeout=scaled(60),
        )
