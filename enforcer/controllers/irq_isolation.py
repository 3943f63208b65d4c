"""The IRQ-isolation controller: with `irqIsolation.enabled`, device interrupts (and the default
affinity new ones get) are kept off the CPUs containers hold exclusively and off the kernel's
isolated CPUs; a CPU given back gets its interrupts back, and at uninstall (the enforcer stopping
for good, or the key turned off) every interrupt returns to the CPUs it had.

Like the CPU classes it acts on the node, not on single containers: the engine hands it the
exclusive CPUs (`exclusive`) before each `remember` / `cpus` round. The affinities it will
change are read first (`remember`) and kept in the state file (`saved`), so that a crash at any
point leaves the originals to the next process.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from enforcer.controllers.base import Findings, Roots
from enforcer.controllers.irq import IrqAffinity
from enforcer.controllers.node_wide import NodeWide
from enforcer.topology import CPUSet, Topology
from resource_contract.config import Config

log = logging.getLogger(__name__)
NAME = "irq"
_SHOWN = 5  # interrupts named in a log line


class IrqIsolation(NodeWide):
    name = NAME
    follows = "interrupts follow the exclusive CPUs"
    saved_key = "originals"

    def __init__(self, procfs_root: str, topology: Topology | None) -> None:
        self.affinity = IrqAffinity(procfs_root)
        self.topology = topology
        self.enabled = False
        self.originals: dict[str, str] = {}
        self._exclusive = CPUSet()
        self._applied: CPUSet | None = None  # the CPUs kept free at the last write

    @classmethod
    def for_node(cls, roots: Roots, topology: Topology | None = None) -> IrqIsolation:
        return cls(roots.procfs or "/proc", topology)

    @property
    def _width(self) -> int:
        online = self.topology.online if self.topology is not None else CPUSet()
        return max(online, default=0) + 1

    def keep_off(self) -> CPUSet:
        """The CPUs interrupts are kept off now: exclusive ones, and the isolated ones."""
        isolated = self.topology.isolated if self.topology is not None else CPUSet()
        return self._exclusive | isolated

    # -- configuration ---------------------------------------------------------------------

    def check(self, config: Config, *, left_out: frozenset[str] = frozenset()) -> Findings:
        found = Findings()
        if config.irqIsolation.enabled and not self.affinity.irqs():
            found.warnings.append(
                f"irqIsolation.enabled: {self.affinity.base} lists no interrupts: nothing to move"
            )
        return found

    def configure(self, config: Config) -> list[str]:
        was, self.enabled = self.enabled, config.irqIsolation.enabled
        if was and not self.enabled:
            self.shutdown()  # turned off: every interrupt back where it was
        self._applied = None
        return []

    # -- the node --------------------------------------------------------------------------

    def exclusive(self, cpus: CPUSet) -> None:
        """The CPUs containers hold exclusively now (the engine, before `remember`/`cpus`)."""
        self._exclusive = CPUSet(cpus)

    def remember(self, classes: Mapping[int, str]) -> bool:
        if not self.enabled:
            return False
        new = {k: v for k, v in self.affinity.read_all().items() if k not in self.originals}
        self.originals.update(new)
        return bool(new)

    def cpus(self, classes: Mapping[int, str]) -> bool:
        if not self.enabled:
            return False
        keep_off = self.keep_off()
        if keep_off == self._applied:
            return False
        done = self.affinity.narrow(self.originals, keep_off, self._width)
        self._applied = keep_off
        if done.moved:
            log.info(
                "interrupts kept off CPUs %s: moved %s",
                keep_off or "none",
                ", ".join(done.moved[:_SHOWN]) + ("..." if len(done.moved) > _SHOWN else ""),
            )
        if done.refused:
            log.info(
                "interrupts the kernel keeps where they are (managed or per-CPU): %s",
                ", ".join(f"{k} ({v})" for k, v in list(done.refused.items())[:_SHOWN]),
            )
        return False

    def kept_originals(self) -> dict[str, str]:
        return self.originals

    def restored(self, key: Any, value: Any) -> tuple[str, str] | None:
        if not isinstance(key, str) or not isinstance(value, str):
            return None
        try:
            CPUSet.parse(value)
        except ValueError:
            return None
        return key, value

    def shutdown(self) -> None:
        if not self.originals:
            return
        done = self.affinity.restore(self.originals, self._width)
        log.info("interrupts back on their original CPUs (%d moved)", len(done.moved))
        self.originals.clear()
        self._applied = None
