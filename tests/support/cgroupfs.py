"""The node's cgroup files as the tests read them, on cgroup v1 (this machine) and v2 (the VM).

cgroup v1 mounts one hierarchy per controller (``/sys/fs/cgroup/cpuset/...``); cgroup v2 has one
unified tree where every controller's files sit side by side (``/sys/fs/cgroup/...``). The root's
CPUs and memory nodes are ``cpuset.cpus``/``cpuset.mems`` on v1 and the ``.effective`` files on
v2 (the v2 root has no ``cpuset.cpus`` of its own).
"""

from __future__ import annotations

from pathlib import Path

from enforcer.controllers.cgroups import cgroup_version, task_ids
from enforcer.topology import CPUSet

ROOT = "/sys/fs/cgroup"


def unified(root: str = ROOT) -> bool:
    """Whether ``root`` is a cgroup v2 (unified) mount."""
    return cgroup_version(root) == 2


def hierarchy(controller: str | None, root: str = ROOT) -> str | None:
    """The v1 hierarchy that holds ``controller``'s files, or None on v2 (one tree for all)."""
    return None if unified(root) else controller


def _root_file(name: str, root: str) -> Path:
    if unified(root):
        return Path(root, f"{name}.effective")
    return Path(root, "cpuset", name)


def node_cpus(root: str = ROOT) -> CPUSet:
    """Every CPU the node's root cgroup has."""
    return CPUSet.parse(_root_file("cpuset.cpus", root).read_text())


def node_mems(root: str = ROOT) -> str:
    """Every memory node the node's root cgroup has, as the kernel writes it ("0-1")."""
    return _root_file("cpuset.mems", root).read_text().strip()


def memory_limit(folder: str | Path) -> int | None:
    """A cgroup's memory limit in bytes (None: unlimited): v1 ``memory.limit_in_bytes``, v2
    ``memory.max``."""
    v2 = Path(folder, "memory.max")
    if v2.exists():
        text = v2.read_text().strip()
        return None if text == "max" else int(text)
    value = int(Path(folder, "memory.limit_in_bytes").read_text())
    return None if value >= 1 << 62 else value


# v1 throttle file name -> its key in v2's io.max
_IO_MAX_KEYS = {
    "read_bps": "rbps",
    "write_bps": "wbps",
    "read_iops": "riops",
    "write_iops": "wiops",
}


def throttle(folder: str | Path, name: str) -> str:
    """A cgroup's throttle ``name`` (read_bps, write_bps, read_iops, write_iops) as v1's
    ``blkio.throttle.<name>_device`` shows it ("MAJ:MIN VALUE" lines); on v2 the same lines made
    from ``io.max`` (a device whose value is "max" is not throttled, as v1 leaves it out)."""
    io_max = Path(folder, "io.max")
    if not io_max.exists():
        return Path(folder, f"blkio.throttle.{name}_device").read_text()
    key = _IO_MAX_KEYS[name]
    lines = []
    for line in io_max.read_text().splitlines():
        device, *pairs = line.split()
        values = dict(pair.split("=", 1) for pair in pairs)
        if values.get(key, "max") != "max":
            lines.append(f"{device} {values[key]}\n")
    return "".join(lines)


def thread_ids(folder: str | Path) -> set[int]:
    """The threads in a cgroup: v2 ``cgroup.threads``, v1 ``tasks``."""
    return set(task_ids(folder))


def memory_nodes_of(cpus: CPUSet, sysfs: str = "/sys") -> str:
    """The NUMA nodes holding ``cpus``, as cpuset.mems shows them ("0", "0-1"), from the
    kernel's ``devices/system/node/node*/cpulist``; "0" on a kernel without NUMA."""
    base = Path(sysfs, "devices/system/node")
    nodes = [
        int(d.name[4:])
        for d in base.glob("node[0-9]*")
        if CPUSet.parse((d / "cpulist").read_text()) & cpus
    ]
    return str(CPUSet.of(*nodes)) if nodes else "0"
