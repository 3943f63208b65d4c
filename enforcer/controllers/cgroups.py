"""Where a container's cgroup lives, as runc makes it for containerd's CRI plugin or CRI-O."""

from __future__ import annotations

import os


def expand_slice(name: str) -> str:
    """systemd slice name -> its path: a-b-c.slice -> /a.slice/a-b.slice/a-b-c.slice."""
    stem = name.removesuffix(".slice")
    parts = stem.split("-")
    return "/" + "/".join("-".join(parts[: i + 1]) + ".slice" for i in range(len(parts)))


# The folder each CRI runtime has runc make for a container, by cgroup driver: containerd's
# CRI plugin first (``<parent>/<id>``, ``cri-containerd-<id>.scope``), then CRI-O's
# (internal/config/cgmgr: ``<parent>/crio-<id>`` with cgroupfs, ``<parent>:crio:<id>`` with
# systemd, which runc makes ``crio-<id>.scope``). The ids are the runtime's, 64 hex digits.
_CGROUPFS_LEAVES = ("{id}", "crio-{id}")
_SYSTEMD_LEAVES = ("cri-containerd-{id}.scope", "crio-{id}.scope")


def container_cgroup_candidates(cgroup_parent: str, container_id: str) -> tuple[str, ...]:
    """Where a container's cgroup may be, relative to a hierarchy's root: containerd's name
    first, then CRI-O's. Plain data, no I/O: ``cgroup_path`` picks the one that exists."""
    if cgroup_parent.endswith(".slice") and "/" not in cgroup_parent:
        parent, leaves = expand_slice(cgroup_parent), _SYSTEMD_LEAVES
    else:
        parent, leaves = cgroup_parent.rstrip("/"), _CGROUPFS_LEAVES
    return tuple("/" + f"{parent}/{leaf.format(id=container_id)}".lstrip("/") for leaf in leaves)


def cgroup_path(
    controller: str | None,
    cgroup_parent: str,
    container_id: str,
    cgroupfs_root: str = "/sys/fs/cgroup",
) -> str:
    """The container's cgroup folder, e.g. /sys/fs/cgroup/cpuset/kubepods/pod<UID>/<id>.

    ``controller`` names the cgroup v1 hierarchy (``cpuset``, ``cpu``, ``memory``, ``blkio``,
    ...); None or "" gives the path under ``cgroupfs_root`` itself (cgroup v2). With the
    cgroupfs driver containerd hands runc ``<parent>/<container id>`` and CRI-O
    ``<parent>/crio-<id>``; with a systemd slice parent runc uses ``<slice
    path>/cri-containerd-<id>.scope`` or ``crio-<id>.scope``. The first of those that exists is
    the container's; when none does (not made yet, or gone), containerd's name.
    """
    base = os.path.join(cgroupfs_root, controller) if controller else cgroupfs_root
    paths = [
        os.path.normpath(base + "/" + rel.lstrip("/"))
        for rel in container_cgroup_candidates(cgroup_parent, container_id)
    ]
    return next((p for p in paths if os.path.isdir(p)), paths[0])


def cgroup_version(cgroupfs_root: str | os.PathLike[str] = "/sys/fs/cgroup") -> int:
    """1 when controllers are mounted per hierarchy (v1 or hybrid), 2 for the unified layout."""
    root = os.fspath(cgroupfs_root)
    return 2 if os.path.exists(os.path.join(root, "cgroup.controllers")) else 1


def task_ids(folder: str | os.PathLike[str]) -> list[int]:
    """Thread ids in a cgroup folder: `cgroup.threads` (v2) or `tasks` (v1)."""
    base = os.fspath(folder)
    for name in ("cgroup.threads", "tasks"):
        path = os.path.join(base, name)
        if os.path.exists(path):
            with open(path) as f:
                return [int(line) for line in f if line.strip()]
    raise FileNotFoundError(f"{base} has neither cgroup.threads nor tasks")


def task_cgroup_dir(
    cgroup_parent: str,
    container_id: str,
    cgroupfs_root: str = "/sys/fs/cgroup",
) -> str:
    """A cgroup folder of the container that lists its threads (for `task_ids`): the v2 folder,
    or with v1 the first hierarchy that has it (every v1 hierarchy lists the same threads)."""
    if cgroup_version(cgroupfs_root) == 2:
        return cgroup_path(None, cgroup_parent, container_id, cgroupfs_root)
    candidates = [
        cgroup_path(c, cgroup_parent, container_id, cgroupfs_root)
        for c in ("cpuset", "cpu", "memory", "pids", "blkio")
    ]
    return next((c for c in candidates if os.path.isdir(c)), candidates[0])
