"""A procfs `irq` folder laid out as the kernel shows it (core-api/irq/irq-affinity.rst):
`/proc/irq/default_smp_affinity` (a hexadecimal mask in 32-bit groups) and, per interrupt,
`smp_affinity` (mask), `smp_affinity_list` (CPU list), `effective_affinity(_list)`, `node`,
`spurious` and `affinity_hint`, plus the handler's folder (its device name)."""

from __future__ import annotations

from pathlib import Path

from enforcer.controllers.irq import cpus_to_mask
from enforcer.topology import CPUSet


def make_irqs(
    proc: str | Path, irqs: dict[int, tuple[str, str]], *, default: str, width: int
) -> Path:
    """`irqs`: number -> (device, CPU list); `default`: the default affinity as a CPU list.
    Returns the procfs root."""
    root = Path(proc)
    base = root / "irq"
    base.mkdir(parents=True)
    (base / "default_smp_affinity").write_text(cpus_to_mask(CPUSet.parse(default), width) + "\n")
    for number, (device, cpus) in irqs.items():
        folder = base / str(number)
        folder.mkdir()
        mask = cpus_to_mask(CPUSet.parse(cpus), width)
        files = {
            "smp_affinity": mask,
            "smp_affinity_list": cpus,
            "effective_affinity": mask,
            "effective_affinity_list": cpus,
            "affinity_hint": cpus_to_mask(CPUSet(), width),
            "node": "0",
            "spurious": "count 0\nunhandled 0\nlast_unhandled 0 ms",
        }
        for name, text in files.items():
            (folder / name).write_text(text + "\n")
        (folder / device).mkdir()
    return root


def affinities(proc: Path) -> dict[str, str]:
    """IRQ number (and `default`, as a mask) -> what the files hold now."""
    base = proc / "irq"
    found = {"default": (base / "default_smp_affinity").read_text().strip()}
    for folder in base.iterdir():
        if folder.name.isdigit():
            found[folder.name] = (folder / "smp_affinity_list").read_text().strip()
    return found
