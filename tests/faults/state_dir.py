"""The enforcer's state folder on a small tmpfs of its own, so that the suite can fill it up or
make it read-only under a running enforcer (and put it back)."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from pathlib import Path

FILLER = ".faults-filler"
CHUNK = 64 * 1024


def _run(*cmd: str) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {done.stderr.strip()}")


class TmpfsStateDir:
    def __init__(self, path: Path, size: str = "2m") -> None:
        self.path = path
        self.size = size
        self.mounted = False
        self.read_only_layer = False

    def mount(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        _run("mount", "-t", "tmpfs", "-o", f"size={self.size},mode=0700", "tmpfs", str(self.path))
        self.mounted = True

    def unmount(self) -> None:
        if self.read_only_layer:
            _run("umount", "-l", str(self.path))  # the bind layer, then the tmpfs under it
            self.read_only_layer = False
        if self.mounted:
            _run("umount", "-l", str(self.path))
            self.mounted = False

    def fill(self) -> None:
        """Writes a filler file until the file system has no block left (ENOSPC)."""
        fd = os.open(self.path / FILLER, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            while True:
                try:
                    os.write(fd, b"\0" * CHUNK)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
            # Down to the last block: smaller writes take what the big ones left.
            for size in (4096, 512, 1):
                with contextlib.suppress(OSError):
                    while True:
                        os.write(fd, b"\0" * size)
        finally:
            os.close(fd)

    def empty(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.path / FILLER).unlink()

    def read_only(self) -> None:
        """Read-only from now on for every new open, rename and unlink under the folder.

        A plain `remount,ro` is refused while a file is open for writing (the enforcer keeps
        its lock file open), so a read-only bind mount of the folder is laid over it: what
        was opened before keeps its access, as after a remount by force.
        """
        if self.read_only_layer:
            return
        _run("mount", "--bind", str(self.path), str(self.path))
        self.read_only_layer = True
        _run("mount", "-o", "remount,bind,ro", str(self.path))

    def read_write(self) -> None:
        # Detached lazily: an enforcer started meanwhile holds its lock file open through the
        # layer (which keeps working); every new open, rename and unlink reaches the tmpfs.
        if self.read_only_layer:
            _run("umount", "-l", str(self.path))
            self.read_only_layer = False
