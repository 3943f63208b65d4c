"""A container's cgroup v2 folder with the memory and CPU files the memory classes and CPU burst
write, as a new cgroup has them (Documentation/admin-guide/cgroup-v2.rst): memory.min and
memory.low `0`, memory.high and memory.swap.max `max`, memory.max the container's limit,
cpu.max `QUOTA PERIOD` (kubelet's, through the runtime) and cpu.max.burst `0`. The hierarchy
around it is tests.support.fake_cgroup's `make_v2`."""

from __future__ import annotations

from pathlib import Path

from tests.support.fake_cgroup import make_v2

DEFAULTS = {
    "memory.min": "0",
    "memory.low": "0",
    "memory.high": "max",
    "memory.swap.max": "max",
    "cpu.max.burst": "0",
}


def make_qos_folder(
    root: str | Path,
    cgroup_parent: str,
    container_id: str,
    *,
    memory_max: int,
    cpu_max: str = "max 100000",
    threads: tuple[int, ...] = (),
) -> Path:
    """The v2 hierarchy down to the container's folder, with the QoS files; that folder."""
    folder = make_v2(root, cgroup_parent, container_id, threads=threads)
    files = {**DEFAULTS, "memory.max": str(memory_max) if memory_max else "max"}
    files["cpu.max"] = cpu_max
    files["memory.current"] = "0"
    files["cpu.weight"] = "100"
    for name, value in files.items():
        (folder / name).write_text(value + "\n")
    return folder


def qos_values(folder: Path) -> dict[str, str]:
    """The QoS files' values (the kernel shows each with a newline)."""
    return {name: (folder / name).read_text().strip() for name in DEFAULTS}
