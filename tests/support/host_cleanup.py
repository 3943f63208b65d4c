"""What a private containerd leaves on the host, and its cleaning: its process group, mounts
below its folder, and the kubepods cgroup folders runc makes and kubelet would remove."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

# Parents of the pod cgroups that kubelet (and so the emulator) uses with the cgroupfs driver.
KUBEPODS = ("kubepods", "kubepods/burstable", "kubepods/besteffort")


def kill_group(proc: subprocess.Popen[bytes], timeout: float) -> None:
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
        if proc.poll() is not None:
            break
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(wait)
    # Whatever else was left in the group (helpers forked by containerd).
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def unmount_under(folder: Path) -> None:
    """Lazily unmount anything still mounted below ``folder`` (rootfs, shm), deepest first."""
    prefix = str(folder.resolve()) + "/"
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return
    points = []
    for line in lines:
        fields = line.split()
        if len(fields) > 4:
            point = fields[4].replace("\\040", " ")
            if point.startswith(prefix):
                points.append(point)
    for point in sorted(points, key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, timeout=10)


def _cgroup_hierarchies(cgroupfs_root: str = "/sys/fs/cgroup") -> list[Path]:
    root = Path(cgroupfs_root)
    try:
        # "unified" too: in hybrid mode runc also makes the folders in the v2 hierarchy.
        return sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink())
    except OSError:
        return []


def existing_pod_cgroups() -> set[str]:
    """Every kubepods cgroup folder that exists now, so that close() leaves them alone."""
    found = set()
    for ctrl in _cgroup_hierarchies():
        for rel in KUBEPODS:
            d = ctrl / rel
            if d.is_dir():
                found.add(str(d))
                found.update(str(p) for p in d.glob("pod*") if p.is_dir())
    return found


def remove_pod_cgroups_of(uid: str) -> None:
    """rmdir the pod-level cgroup folders kubelet would have removed (runc leaves them)."""
    if not uid:
        return
    for ctrl in _cgroup_hierarchies():
        for rel in ("kubepods", "kubepods/burstable", "kubepods/besteffort"):
            with contextlib.suppress(OSError):
                (ctrl / rel / f"pod{uid}").rmdir()


def remove_new_pod_cgroups(before: set[str]) -> None:
    """rmdir the empty kubepods folders that appeared while we ran, deepest first."""
    for ctrl in _cgroup_hierarchies():
        candidates = []
        for rel in KUBEPODS:
            d = ctrl / rel
            if d.is_dir():
                candidates.append(d)
                candidates.extend(p for p in d.glob("pod*") if p.is_dir())
        for d in sorted(candidates, key=lambda p: len(p.parts), reverse=True):
            if str(d) not in before:
                with contextlib.suppress(OSError):
                    d.rmdir()
