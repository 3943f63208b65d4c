"""The cluster's daemons as detached processes: started with their log in ``logs/NAME.log`` and
a pid file in ``run/NAME.pid`` (pid and kernel start time, so a reused pid is never signalled),
so that a later ``make cluster-down`` in another process finds and stops them."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from tests.support.cluster.layout import Layout


class ClusterError(RuntimeError):
    """A component did not start, or did not become ready in time."""


def _start_time(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # field 22: starttime


def start(lay: Layout, name: str, argv: Sequence[str], *, env: dict[str, str] | None = None) -> int:
    """Start ``argv`` in a session of its own, stdout and stderr appended to its log."""
    lay.logs.mkdir(parents=True, exist_ok=True)
    lay.run.mkdir(parents=True, exist_ok=True)
    with open(lay.log(name), "ab") as log:
        log.write(f"\n==== {time.ctime()}: {' '.join(argv)}\n".encode())
        log.flush()
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
            close_fds=True,
        )
    lay.pid_file(name).write_text(f"{proc.pid} {_start_time(proc.pid)}\n")
    return proc.pid


def pid_of(lay: Layout, name: str) -> int | None:
    """The pid of a running component started by `start`, else None."""
    try:
        pid_s, started = lay.pid_file(name).read_text().split()
    except (OSError, ValueError):
        return None
    pid = int(pid_s)
    if _start_time(pid) != started:
        return None
    with contextlib.suppress(OSError):
        if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            return None
    return pid


def stop(lay: Layout, name: str, timeout: float = 20.0) -> None:
    """SIGTERM to the component's process group, SIGKILL after ``timeout``."""
    pid = pid_of(lay, name)
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while pid_of(lay, name) is not None and time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            time.sleep(0.1)
        if pid_of(lay, name) is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            while pid_of(lay, name) is not None and time.monotonic() < deadline + 10:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
                time.sleep(0.1)
    lay.pid_file(name).unlink(missing_ok=True)


def wait_until(
    what: str, check: Callable[[], object], timeout: float, *, log: Path | None = None
) -> None:
    """Poll ``check`` until it returns a true value; ClusterError (with the log's tail) when
    ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception as e:  # the component is not there yet: keep waiting
            last = e
        time.sleep(0.5)
    tail = ""
    if log is not None and log.exists():
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        tail = f"\n--- last lines of {log}:\n{tail}"
    cause = f" (last error: {last})" if last else ""
    raise ClusterError(f"timed out after {timeout:.0f} s waiting for {what}{cause}{tail}")
