"""The cpufreq, cpuidle and intel_uncore_frequency files of a sysfs, laid out as the kernel
documents them (Documentation/admin-guide/pm/cpufreq.rst, .../pm/intel_uncore_frequency_scaling.rst,
.../pm/cpuidle.rst): values in kHz, one per file, a newline at the end; C-states by `name`.

`make_sysfs(root)` writes them for a small synthetic machine (`MACHINE`); given a topology (read
from a copy of a real sysfs snapshot), it adds them beside that snapshot's own files, so a real
enforcer process pointed at the copy with `--sysfs-root` reads a real topology and writes CPU
classes where the kernel has them."""

from __future__ import annotations

from pathlib import Path

from enforcer.topology import Topology

# 1 socket, 2 dies, 2 cores per die, 2 threads: die 0 = CPUs 0,1,4,5; die 1 = 2,3,6,7.
MACHINE = Topology.synthetic(dies_per_socket=2, cores_per_node=2)
CSTATES = ["POLL", "C1", "C1E", "C6"]
# What a CPU shows before anybody set a class (an intel_pstate machine's defaults, in kHz).
SCALING_MIN, SCALING_MAX = 800000, 3000000


def make_sysfs(
    root: Path,
    topology: Topology = MACHINE,
    *,
    cpufreq: bool = True,
    uncore: bool = True,
) -> Path:
    cpu = root / "devices/system/cpu"
    for n in topology.cpus:
        if cpufreq:
            freq = cpu / f"cpu{n}/cpufreq"
            freq.mkdir(parents=True)
            for name, value in (
                ("cpuinfo_min_freq", 800000),
                ("cpuinfo_max_freq", 3800000),
                ("scaling_min_freq", SCALING_MIN),
                ("scaling_max_freq", SCALING_MAX),
            ):
                (freq / name).write_text(f"{value}\n")
            (freq / "scaling_governor").write_text("powersave\n")
        for i, name in enumerate(CSTATES):
            state = cpu / f"cpu{n}/cpuidle/state{i}"
            state.mkdir(parents=True)
            (state / "name").write_text(f"{name}\n")
            (state / "disable").write_text("0\n")
    if uncore:
        dies = sorted({(c.socket, c.die) for c in topology.cpus.values()})
        for socket, die in dies:
            folder = cpu / f"intel_uncore_frequency/package_{socket:02d}_die_{die:02d}"
            folder.mkdir(parents=True)
            for name, value in (
                ("initial_min_freq_khz", 800000),
                ("initial_max_freq_khz", 2400000),
                ("min_freq_khz", 1200000),
                ("max_freq_khz", 2400000),
            ):
                (folder / name).write_text(f"{value}\n")
    return root


def read(root: Path, rel: str) -> str:
    """One file under devices/system/cpu, without sysfs's newline."""
    return (root / "devices/system/cpu" / rel).read_text().strip()


def snapshot(root: Path) -> dict[str, str]:
    """Every file under root, by its path relative to root."""
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def class_files(root: Path) -> dict[str, str]:
    """The files a CPU class writes (frequencies, uncore, C-states' `disable`), values stripped."""
    cpu = root / "devices/system/cpu"
    patterns = ("cpu*/cpufreq/scaling_m*_freq", "cpu*/cpuidle/state*/disable")
    found = [p for pattern in patterns for p in cpu.glob(pattern)]
    found += list(cpu.glob("intel_uncore_frequency/*/m*_freq_khz"))
    return {str(p.relative_to(root)): p.read_text().strip() for p in sorted(found)}
