"""The cpuset controller's read-back: what the kernel has for a container (for verification).

The pinning itself is written by the runtime (UpdateContainerResources, or the OCI spec at
creation); the enforcer reads the container's own cgroup files to check it took.
"""

from __future__ import annotations

import os

from enforcer.controllers.cgroups import cgroup_path, cgroup_version


class CgroupCpusets:
    def __init__(self, cgroupfs_root: str = "/sys/fs/cgroup") -> None:
        self.root = cgroupfs_root

    def read(self, cgroup_parent: str, container_id: str) -> tuple[str, str] | None:
        """The container's cpuset.cpus and cpuset.mems; None when its cgroup is gone."""
        v2 = cgroup_version(self.root) == 2
        folder = cgroup_path(None if v2 else "cpuset", cgroup_parent, container_id, self.root)
        # v2 shows the CPUs in effect (cpuset.cpus is empty when inherited); v1's cpuset.cpus
        # is always set, to the parent's when nobody narrowed it.
        names = (
            ("cpuset.cpus.effective", "cpuset.mems.effective")
            if v2
            else (
                "cpuset.cpus",
                "cpuset.mems",
            )
        )
        try:
            cpus, mems = (_read(os.path.join(folder, n)) for n in names)
        except FileNotFoundError:
            return None
        return cpus, mems


def _read(path: str) -> str:
    with open(path) as f:
        return f.read().strip()
