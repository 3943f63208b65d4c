"""runc, with `runc start` held until a container has forked its children.

For a private containerd's `BinaryName`: the shim calls this in place of runc. Every command
is the real runc's (exec'd, same arguments and file descriptors); after a successful
`runc start` of a container whose environment has `KRE_WAIT_TASKS=N`, it waits until the
container's cgroup lists N threads (at most 10 s) before returning. containerd's
StartContainer, and what the enforcer does after it, therefore see the container's children
all forked. (runc 1.1 runs OCI poststart hooks at `runc create`, before the process starts,
so a hook cannot do this.) `KRE_HOLD_START=S` holds `runc start` S seconds: the container
stays "in starting state" that long.

`install(folder)` writes the executable wrapper and returns its path. The wrapper itself runs
this file as a script (standard library only).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ENV = "KRE_WAIT_TASKS"
WAIT_SECONDS = 10.0
# A container whose environment has `KRE_HOLD_START=S` has its `runc start` held S seconds (at
# most HOLD_SECONDS) after it started: containerd's StartContainer is under way all that time,
# and the container is "in starting state" (RemoveContainer refused, StopContainer a no-op).
HOLD = "KRE_HOLD_START"
HOLD_SECONDS = 120.0
REAL = "KRE_REAL_RUNC"


def install(folder: str | os.PathLike[str]) -> str:
    """An executable `runc` in `folder` that runs this file with the real runc named."""
    real = shutil.which("runc")
    if real is None:
        raise RuntimeError("runc is not on PATH")
    path = Path(folder) / "runc"
    path.write_text(
        f'#!/bin/sh\n{REAL}={real} exec {sys.executable} {os.path.abspath(__file__)} "$@"\n'
    )
    path.chmod(0o755)
    return str(path)


def _global_args(args: list[str]) -> list[str]:
    """runc's global options (before the command): --root, --log, --log-format, ..."""
    valued = {"--root", "--log", "--log-format", "--criu", "--rootless"}
    out: list[str] = []
    it = iter(args)
    for arg in it:
        if not arg.startswith("-"):
            break
        out.append(arg)
        if arg in valued:
            out.append(next(it, ""))
    return out


def _threads_file(pid: int) -> Path | None:
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, rel = line.split(":", 2)
        if controllers == "":  # cgroup v2
            return Path("/sys/fs/cgroup", rel.lstrip("/"), "cgroup.threads")
        if "cpuset" in controllers.split(","):
            return Path("/sys/fs/cgroup", controllers, rel.lstrip("/"), "tasks")
    return None


def _hold(real: str, global_args: list[str], container: str) -> None:
    state = json.loads(
        subprocess.run(
            [real, *global_args, "state", container], capture_output=True, check=True
        ).stdout
    )
    config = json.loads(Path(state["bundle"], "config.json").read_text())
    wanted = 0
    hold = 0.0
    for item in config.get("process", {}).get("env", []):
        name, _, value = item.partition("=")
        if name == ENV:
            wanted = int(value)
        elif name == HOLD:
            hold = min(float(value), HOLD_SECONDS)
    if hold > 0:
        time.sleep(hold)
    threads = _threads_file(int(state["pid"])) if wanted else None
    deadline = time.monotonic() + WAIT_SECONDS
    while threads is not None and time.monotonic() < deadline:
        if len(threads.read_text().split()) >= wanted:
            return
        time.sleep(0.01)


def main() -> int:
    real = os.environ[REAL]
    args = sys.argv[1:]
    global_args = _global_args(args)
    rest = args[len(global_args) :]
    if not rest or rest[0] != "start":
        os.execv(real, [real, *args])
    code = subprocess.call([real, *args])
    if code == 0:
        try:
            _hold(real, global_args, rest[-1])
        except Exception as exc:  # the container runs: never fail its start for this
            print(f"held_runc: {exc}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
