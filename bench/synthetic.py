"""A synthetic sysfs tree for a machine larger than any snapshot: the bench's own generator.

`write_sysfs(root)` writes `<root>/devices/system/{cpu,node}` the way Linux lays them out on a
2-socket server of 192 cores per socket with 2 threads each (768 CPUs, as AMD's 192-core parts
give): logical CPUs numbered first thread 0 of every core socket by socket, then thread 1; one
NUMA node per socket (NPS1) with its memory and the usual 10/32 distances; an L3 shared by
every 16 cores (a CCX). Only the files `enforcer.topology.read_topology` reads are written.
"""

from __future__ import annotations

from pathlib import Path

from enforcer.topology import CPUSet


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def write_sysfs(
    root: Path,
    *,
    sockets: int = 2,
    cores_per_socket: int = 192,
    threads: int = 2,
    cores_per_l3: int = 16,
    memory_per_node_gib: int = 768,
) -> Path:
    """Writes the tree under `root` and returns `root` (pass it as --sysfs-root)."""
    cores = sockets * cores_per_socket
    total = cores * threads
    system = root / "devices" / "system"
    cpu_dir, node_dir = system / "cpu", system / "node"
    _write(cpu_dir / "online", f"0-{total - 1}")
    _write(cpu_dir / "possible", f"0-{total - 1}")
    _write(cpu_dir / "present", f"0-{total - 1}")

    def cpu_id(core: int, thread: int) -> int:
        return thread * cores + core

    socket_cpus: dict[int, list[int]] = {s: [] for s in range(sockets)}
    for core in range(cores):
        socket, local = divmod(core, cores_per_socket)
        siblings = CPUSet(cpu_id(core, t) for t in range(threads))
        l3_first = core - local % cores_per_l3
        l3 = CPUSet(
            cpu_id(c, t)
            for c in range(l3_first, min(l3_first + cores_per_l3, (socket + 1) * cores_per_socket))
            for t in range(threads)
        )
        for thread in range(threads):
            cpu = cpu_id(core, thread)
            socket_cpus[socket].append(cpu)
            topo = cpu_dir / f"cpu{cpu}" / "topology"
            _write(topo / "physical_package_id", str(socket))
            _write(topo / "die_id", "0")
            _write(topo / "core_id", str(local))
            _write(topo / "thread_siblings_list", str(siblings))
            _write(topo / "core_cpus_list", str(siblings))
            index3 = cpu_dir / f"cpu{cpu}" / "cache" / "index3"
            _write(index3 / "level", "3")
            _write(index3 / "type", "Unified")
            _write(index3 / "shared_cpu_list", str(l3))
            _write(index3 / "id", str(l3_first // cores_per_l3))
    _write(node_dir / "online", f"0-{sockets - 1}")
    for node in range(sockets):
        path = node_dir / f"node{node}"
        _write(path / "cpulist", str(CPUSet(socket_cpus[node])))
        kib = memory_per_node_gib * 1024 * 1024
        _write(path / "meminfo", f"Node {node} MemTotal:       {kib} kB")
        _write(path / "distance", " ".join("10" if n == node else "32" for n in range(sockets)))
    return root
