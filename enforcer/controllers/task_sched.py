"""A scheduling class on one thread: SCHED policy and priority, nice, I/O class and level.

The kernel's per-thread calls: sched_setscheduler(2), setpriority(2) with PRIO_PROCESS (which on
Linux names one thread), and ioprio_set(2) with IOPRIO_WHO_PROCESS (through ctypes: the standard
library has no wrapper). Only the keys a class sets are written and compared; `reset` puts the
kernel's defaults back for those keys (policy other, priority 0, nice 0, no I/O class).
"""

from __future__ import annotations

import ctypes
import os
import platform
from dataclasses import dataclass

from resource_contract.task_classes import SchedulingClass

_POLICIES: dict[str, int] = {
    "other": os.SCHED_OTHER,
    "batch": os.SCHED_BATCH,
    "idle": os.SCHED_IDLE,
    "fifo": os.SCHED_FIFO,
    "rr": os.SCHED_RR,
}
_POLICY_NAMES = {number: name for name, number in _POLICIES.items()}
# include/uapi/linux/ioprio.h
_IO_CLASSES = {"rt": 1, "be": 2, "idle": 3}
_IO_CLASS_NAMES = {0: "none", **{number: name for name, number in _IO_CLASSES.items()}}
_IOPRIO_CLASS_SHIFT = 13
_IOPRIO_WHO_PROCESS = 1
# (ioprio_set, ioprio_get) by machine: arch/x86/entry/syscalls, include/uapi/asm-generic.
_SYSCALLS = {"x86_64": (251, 252), "aarch64": (30, 31), "arm64": (30, 31)}

_libc = ctypes.CDLL(None, use_errno=True)


class ThreadGone(Exception):
    """The thread exited before it could be read or written."""


@dataclass(frozen=True)
class ThreadSched:
    """What the kernel has for one thread."""

    policy: str
    priority: int
    nice: int
    io_class: str
    io_level: int


def _ioprio_syscall(which: int, *args: int) -> int:
    numbers = _SYSCALLS.get(platform.machine())
    if numbers is None:
        raise OSError(f"ioprio_set/ioprio_get: unknown system call numbers on {platform.machine()}")
    result = int(_libc.syscall(numbers[which], *(ctypes.c_int(a) for a in args)))
    if result < 0:
        err = ctypes.get_errno()
        if err == 3:  # ESRCH
            raise ThreadGone
        raise OSError(err, os.strerror(err))
    return result


def read(tid: int) -> ThreadSched:
    """The thread's scheduling values now; ThreadGone when it has exited."""
    try:
        policy = os.sched_getscheduler(tid) & ~getattr(os, "SCHED_RESET_ON_FORK", 0)
        priority = os.sched_getparam(tid).sched_priority
        nice = os.getpriority(os.PRIO_PROCESS, tid)
    except ProcessLookupError:
        raise ThreadGone from None
    value = _ioprio_syscall(1, _IOPRIO_WHO_PROCESS, tid)
    return ThreadSched(
        _POLICY_NAMES.get(policy, str(policy)),
        priority,
        nice,
        _IO_CLASS_NAMES.get(value >> _IOPRIO_CLASS_SHIFT, "none"),
        value & ((1 << _IOPRIO_CLASS_SHIFT) - 1),
    )


def differences(cls: SchedulingClass, now: ThreadSched) -> list[str]:
    """What the thread has that differs from the keys `cls` sets, as `key X (want Y)`."""
    found = []
    wanted = (
        ("policy", cls.policy, now.policy),
        ("priority", cls.priority, now.priority),
        ("nice", cls.nice, now.nice),
        ("ioClass", cls.ioClass, now.io_class),
        ("ioPriority", cls.ioPriority, now.io_level),
    )
    for key, want, have in wanted:
        if want is not None and want != have:
            found.append(f"{key} {have} (want {want})")
    return found


def apply(tid: int, cls: SchedulingClass) -> None:
    """Writes the keys `cls` sets on one thread; ThreadGone when it has exited, OSError when
    the kernel refuses."""
    try:
        if cls.policy is not None:
            priority = cls.priority if cls.priority is not None else 0
            os.sched_setscheduler(tid, _POLICIES[cls.policy], os.sched_param(priority))
        if cls.nice is not None:
            os.setpriority(os.PRIO_PROCESS, tid, cls.nice)
    except ProcessLookupError:
        raise ThreadGone from None
    if cls.ioClass is not None:
        level = cls.ioPriority if cls.ioPriority is not None else 0
        value = (_IO_CLASSES[cls.ioClass] << _IOPRIO_CLASS_SHIFT) | level
        _ioprio_syscall(0, _IOPRIO_WHO_PROCESS, tid, value)


def reset(tid: int, cls: SchedulingClass) -> None:
    """Puts the kernel's defaults back for the keys `cls` set; ThreadGone, OSError as `apply`."""
    try:
        if cls.policy is not None:
            os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
        if cls.nice is not None:
            os.setpriority(os.PRIO_PROCESS, tid, 0)
    except ProcessLookupError:
        raise ThreadGone from None
    if cls.ioClass is not None:
        _ioprio_syscall(0, _IOPRIO_WHO_PROCESS, tid, 0)
