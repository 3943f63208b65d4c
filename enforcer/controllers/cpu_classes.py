"""The CPU-class controller in the engine's life cycle: frequencies and C-states follow the
CPUs the policy gives a class (a balloon type's `cpuClass`), not single containers; what was
there before is kept in the state file and put back when the enforcer stops."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from enforcer.controllers.base import Findings, Roots
from enforcer.controllers.cpu_class_sysfs import CpuClassSysfs
from enforcer.controllers.node_wide import NodeWide
from enforcer.topology import Topology
from resource_contract.config import Config

NAME = "cpuclass"


class CpuClasses(NodeWide):
    name = NAME
    follows = "CPU classes follow the CPUs"
    saved_key = "remembered"

    def __init__(self, sysfs_root: str | None, topology: Topology | None) -> None:
        self.sysfs_root = sysfs_root
        self.topology = topology
        self.ctl: CpuClassSysfs | None = None
        self._remembered: dict[str, str] = {}
        self._applied: dict[int, str] | None = None

    @classmethod
    def for_node(cls, roots: Roots, topology: Topology | None = None) -> CpuClasses:
        return cls(roots.sysfs, topology)

    # -- configuration ---------------------------------------------------------------------

    def check(self, config: Config, *, left_out: frozenset[str] = frozenset()) -> Findings:
        found = Findings()
        if not config.cpuClasses or self.sysfs_root is None:
            return found
        cpu0 = os.path.join(self.sysfs_root, "devices/system/cpu/cpu0")
        if os.path.isdir(cpu0) and not os.path.isdir(os.path.join(cpu0, "cpufreq")):
            found.warnings.append(
                f"cpuClasses: {self.sysfs_root} has no cpufreq driver: the classes' "
                "frequencies will not be set on such a machine"
            )
        return found

    def configure(self, config: Config) -> list[str]:
        if self.ctl is None:
            if self.sysfs_root is None or self.topology is None:
                return []
            self.ctl = CpuClassSysfs(
                self.sysfs_root, self.topology, config.cpuClasses, remembered=self._remembered
            )
            return []
        # Written by the next `cpus`, after the engine has saved what `remember` read.
        self.ctl.configure(config.cpuClasses, write=False)
        self._applied = None
        return []

    # -- the node --------------------------------------------------------------------------

    def remember(self, classes: Mapping[int, str]) -> bool:
        if self.ctl is None or dict(classes) == self._applied:
            return False
        return self.ctl.remember(classes)

    def cpus(self, classes: Mapping[int, str]) -> bool:
        if self.ctl is None or dict(classes) == self._applied:
            return False
        before = dict(self.ctl.remembered)
        self.ctl.apply(classes)
        self._applied = dict(classes)
        return self.ctl.remembered != before

    def kept_originals(self) -> dict[str, str]:
        return self.ctl.remembered if self.ctl is not None else self._remembered

    def restored(self, key: Any, value: Any) -> tuple[str, str] | None:
        return (str(key), str(value)) if isinstance(value, (str, int)) else None

    def shutdown(self) -> None:
        if self.ctl is not None:
            self.ctl.restore_all()
            self._applied = None
