"""Telling a hung emulated VM from a slow one: no ssh reply and no write to its disks for long.

Twice on this 2-core machine, in a whole `make test`, the background VM (QEMU's software
emulation at nice 19) stopped for good a minute into the subset: its overlay disk was never
written again, its serial console printed nothing more, QEMU took both cores, and ssh got no
banner (QEMU's port forward took the connection, the guest never answered it), for 25 minutes
after the host's own tests had ended and left it the whole machine. A VM that is only slow still
writes its disks (the kernel flushes every few seconds; the subset's pytest and containerd write
all along) or answers ssh now and then. So a VM that has done neither for ``hang_seconds()``
counts as hung: tests/support/vm_background.py then collects what QEMU's threads are doing, boots
the VM again and runs the subset once more.
"""

from __future__ import annotations

import os
from pathlib import Path

# Long enough for a VM starved by a busy host (it answered within minutes in every such run),
# short enough that a rerun still fits CI's time.
HANG_SECONDS = 15 * 60.0
# What a hung VM writes no more: its disks' overlays and its serial console.
WRITTEN = ("root.qcow2", "scratch.qcow2", "console.log")


def hang_seconds() -> float:
    """``HANG_SECONDS``, or ``KRE_VM_HANG_SECONDS`` (a positive number of seconds) when set."""
    value = os.environ.get("KRE_VM_HANG_SECONDS", "")
    if not value:
        return HANG_SECONDS
    try:
        seconds = float(value)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        raise ValueError(f"KRE_VM_HANG_SECONDS: {value!r} is not a positive number of seconds")
    return seconds


def last_write(run: Path) -> float:
    """When QEMU last wrote a file of the VM's in ``run`` (wall clock; 0 when there is none)."""
    times = []
    for name in WRITTEN:
        try:
            times.append((run / name).stat().st_mtime)
        except FileNotFoundError:
            continue
    return max(times, default=0.0)


def hang_reason(now: float, last_reply: float, written: float, limit: float) -> str | None:
    """Why the VM counts as hung at ``now`` (wall clock), or None while it has answered ssh or
    written a disk within ``limit`` seconds."""
    if now - max(last_reply, written) < limit:
        return None
    return (
        f"no ssh reply for {now - last_reply:.0f} s and no write to its disks or console for "
        f"{now - written:.0f} s (the limit: {limit:.0f} s)"
    )


def threads(pid: int) -> str:
    """What QEMU's threads are doing: name, state, kernel wait channel, CPU seconds."""
    tick = os.sysconf("SC_CLK_TCK")
    lines = []
    try:
        tasks = sorted(os.listdir(f"/proc/{pid}/task"), key=int)
    except OSError as e:
        return f"(QEMU's threads cannot be read: {e})"
    for tid in tasks:
        base = Path(f"/proc/{pid}/task/{tid}")
        try:
            stat = (base / "stat").read_text()
            wchan = (base / "wchan").read_text().strip() or "-"
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        cpu = (int(fields[11]) + int(fields[12])) / tick
        lines.append(f"{tid} {name}: state {fields[0]}, waiting in {wchan}, {cpu:.0f} CPU s")
    return "; ".join(lines)
