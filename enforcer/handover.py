"""Two enforcers on one node, briefly: how the one that starts takes over from the one running.

A DaemonSet update starts the new pod before the old one stops (maxSurge 1, maxUnavailable 0):
kubelet reaches the runtime only through the relay, so with no relay in between it could not
start the new pod at all. For that moment:

- the state folder has one owner at a time, an exclusive `flock` on `enforcer.lock`;
- the newcomer binds the relay socket right away (new connections reach it), and queues its
  intercepted calls behind taking the lock and loading the state;
- the incumbent sees another socket at its path, stops accepting, sends GOAWAY (kubelet
  reconnects, to the newcomer), finishes its calls in flight, saves the state and releases
  the lock; then it idles, writing nothing, until its pod is deleted.

And when no enforcer runs at all (the DaemonSet removed, a reboot): with `--fallback-link` the
relay socket path is left as a symbolic link to the runtime's socket, so kubelet still reaches
the runtime, directly. The next enforcer replaces the link with its socket.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import stat
import threading
import time
from pathlib import Path

log = logging.getLogger(__name__)

LOCK_FILE = "enforcer.lock"
WAIT_LOG_SECONDS = 10.0


class StateLock:
    """The state folder's owner lock (released by the kernel when the process dies)."""

    def __init__(self, state_dir: str | Path) -> None:
        self.path = Path(state_dir) / LOCK_FILE
        self.fd: int | None = None
        self.held_once = False  # this process owned the state at some point
        self._abandoned = threading.Event()

    def try_acquire(self) -> bool:
        """Takes the lock if nobody holds it. OSError when there is no lock file and none can
        be made (the folder cannot be written); an existing one locks on a read-only folder."""
        try:
            # O_NOFOLLOW: a link planted at the lock file is not opened (ELOOP).
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            if exc.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
                raise
            try:
                # flock needs no writes
                fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
            except FileNotFoundError:
                raise exc from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self.fd = fd
        self.held_once = True
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        return True

    def holder(self) -> str:
        try:
            return self.path.read_text().strip() or "?"
        except OSError:
            return "?"

    def acquire(self, poll: float = 0.05) -> bool:
        """Blocks until the lock is ours (True) or `abandon()` was called (False), logging now
        and then who holds it."""
        started = time.monotonic()
        next_log = started + WAIT_LOG_SECONDS
        while not self.try_acquire():
            if self._abandoned.wait(poll):
                return False
            now = time.monotonic()
            if now >= next_log:
                log.warning(
                    "still waiting for enforcer pid %s to hand over %s (%.0fs)",
                    self.holder(),
                    self.path.parent,
                    now - started,
                )
                next_log = now + WAIT_LOG_SECONDS
        return True

    def abandon(self) -> None:
        self._abandoned.set()

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the only descriptor drops the flock
            self.fd = None


def socket_inode(path: str) -> int:
    return os.stat(path).st_ino


def successor_listening(path: str, own_inode: int) -> bool:
    """Whether another socket than ours now sits at ``path`` (a newer enforcer bound it)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    return stat.S_ISSOCK(st.st_mode) and st.st_ino != own_inode


def leave_fallback_link(relay_socket: str, runtime_socket: str) -> bool:
    """Points the (now free) relay socket path at the runtime's socket. Never replaces anything:
    a successor's socket there stays."""
    try:
        os.symlink(runtime_socket, relay_socket)
    except FileExistsError:
        return False
    except OSError as exc:
        log.warning("cannot leave %s -> %s: %s", relay_socket, runtime_socket, exc.strerror)
        return False
    log.info("left %s -> %s for kubelet while no enforcer runs", relay_socket, runtime_socket)
    return True
