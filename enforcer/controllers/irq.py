"""Device interrupts' CPU affinity in procfs: read, narrowed to leave some CPUs alone, put back.

`/proc/irq/N/smp_affinity_list` (a CPU list, "0-3,8") for each interrupt, and
`/proc/irq/default_smp_affinity` (a hexadecimal mask in 32-bit groups, "3" or "ff,ffffffff")
for interrupts registered later. The procfs root is a parameter, so a test runs the same code on a
fake tree. The kernel refuses some writes (managed interrupts, per-CPU ones: EIO or EINVAL): such
an interrupt is left as it is and reported, never an error of the whole.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from enforcer.topology import CPUSet

DEFAULT = "default"  # the key of default_smp_affinity among the IRQ numbers


def mask_to_cpus(text: str) -> CPUSet:
    """ "0000000f,000000ff" -> the CPUs whose bits are set."""
    value = int(text.replace(",", "").strip() or "0", 16)
    return CPUSet(i for i in range(value.bit_length()) if value >> i & 1)


def cpus_to_mask(cpus: CPUSet, width: int) -> str:
    """The CPUs as the kernel prints a mask of `width` bits (%*pb): as many hex digits as the
    width needs, in comma-separated groups of 8 from the right ("3", "ff,ffffffff")."""
    value = sum(1 << c for c in cpus)
    digits = max(1, (max(width, value.bit_length()) + 3) // 4)
    text = f"{value:0{digits}x}"
    groups = [text[max(0, i - 8) : i] for i in range(len(text), 0, -8)]
    return ",".join(reversed(groups))


@dataclass
class Written:
    """What one round of writes did: IRQs moved, IRQs the kernel would not move (and why)."""

    moved: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)


class IrqAffinity:
    def __init__(self, procfs_root: str = "/proc") -> None:
        self.base = os.path.join(procfs_root, "irq")

    def _path(self, irq: str) -> str:
        if irq == DEFAULT:
            return os.path.join(self.base, "default_smp_affinity")
        return os.path.join(self.base, irq, "smp_affinity_list")

    def irqs(self) -> list[str]:
        """The interrupt numbers procfs lists, in numeric order."""
        try:
            names = os.listdir(self.base)
        except FileNotFoundError:
            return []
        return sorted((n for n in names if n.isdigit()), key=int)

    def read(self, irq: str) -> CPUSet:
        with open(self._path(irq)) as f:
            text = f.read().strip()
        return mask_to_cpus(text) if irq == DEFAULT else CPUSet.parse(text)

    def read_all(self) -> dict[str, str]:
        """IRQ (and `default`) -> its affinity as a CPU list; unreadable ones left out."""
        found: dict[str, str] = {}
        for irq in [DEFAULT, *self.irqs()]:
            try:
                found[irq] = str(self.read(irq))
            except (OSError, ValueError):
                continue
        return found

    def write(self, irq: str, cpus: CPUSet, width: int) -> None:
        text = cpus_to_mask(cpus, width) if irq == DEFAULT else str(cpus)
        with open(self._path(irq), "w") as f:
            f.write(text)

    def narrow(self, originals: Mapping[str, str], keep_off: CPUSet, width: int) -> Written:
        """Every remembered IRQ on its original CPUs less `keep_off` (all of its original CPUs
        when that leaves none: an interrupt needs a CPU). Only values that differ are written."""
        done = Written()
        for irq, original in originals.items():
            was = CPUSet.parse(original)
            want = (was - keep_off) or was
            try:
                if self.read(irq) == want:
                    continue
                self.write(irq, want, width)
            except FileNotFoundError:
                continue  # the device went away
            except (OSError, ValueError) as exc:
                done.refused[irq] = getattr(exc, "strerror", None) or str(exc)
                continue
            done.moved.append(irq)
        return done

    def restore(self, originals: Mapping[str, str], width: int) -> Written:
        """Every remembered IRQ back on its original CPUs."""
        return self.narrow(originals, CPUSet(), width)
