"""`resource-enforcer run --supervise`: the relay in a child process, started again if it dies.

kubelet reaches the runtime only through the relay. If the relay process dies abnormally (a
crash, SIGKILL, the OOM killer), kubelet can start nothing on the node, not even the
enforcer's own replacement container. This parent holds no state and does nothing but wait,
pass signals on and start the relay again, so a dead relay is back within a second or so.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from types import FrameType

log = logging.getLogger("enforcer.supervisor")

FIRST_DELAY = 0.2  # seconds before the first restart; doubled for each quick failure
MAX_DELAY = 5.0
STEADY_SECONDS = 60.0  # a child that ran this long resets the delay


def child_command(argv: Sequence[str]) -> list[str]:
    """The same `run` command line, without --supervise, under this interpreter."""
    return [sys.executable, "-m", "enforcer.cli", *(a for a in argv if a != "--supervise")]


def supervise(command: list[str]) -> int:
    stopping = threading.Event()
    child: subprocess.Popen[bytes] | None = None

    def forward(signum: int, _frame: FrameType | None) -> None:
        if signum in (signal.SIGTERM, signal.SIGINT):
            stopping.set()
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    delay = FIRST_DELAY
    while True:
        started = time.monotonic()
        child = subprocess.Popen(command)
        if stopping.is_set():  # the stop came while there was no child to pass it to
            child.terminate()
        log.info("relay process %d started", child.pid)
        code = child.wait()
        if stopping.is_set():
            return code if code >= 0 else 128 - code
        ran = time.monotonic() - started
        if ran >= STEADY_SECONDS:
            delay = FIRST_DELAY
        how = f"was killed by signal {-code}" if code < 0 else f"exited with {code}"
        log.error(
            "relay process %d %s after %.1fs; starting it again in %.1fs",
            child.pid,
            how,
            ran,
            delay,
        )
        if stopping.wait(delay):
            return 0
        delay = min(delay * 2, MAX_DELAY)
