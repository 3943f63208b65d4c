"""A thread's scheduling values as the kernel reports them to util-linux's `chrt` and `ionice`
and in procfs: the truth the scheduling-class tests compare with, never the enforcer's own."""

from __future__ import annotations

import subprocess
from pathlib import Path


def _chrt(tid: int) -> list[str]:
    out = subprocess.run(["chrt", "-p", str(tid)], capture_output=True, text=True, check=True)
    return out.stdout.splitlines()


def policy_of(tid: int) -> str:
    """SCHED_OTHER, SCHED_BATCH, SCHED_IDLE, SCHED_FIFO or SCHED_RR."""
    return _chrt(tid)[0].rsplit(" ", 1)[-1]


def rt_priority_of(tid: int) -> int:
    return int(_chrt(tid)[1].rsplit(" ", 1)[-1])


def ionice_of(tid: int) -> str:
    """ "idle", "best-effort: prio 6", "realtime: prio 0", "none: prio 4", ..."""
    out = subprocess.run(["ionice", "-p", str(tid)], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def nice_of(tid: int) -> int:
    fields = Path(f"/proc/{tid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[16])  # field 19 of proc(5), counted after the command's parenthesis
