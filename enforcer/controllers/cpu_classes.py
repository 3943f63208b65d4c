"""The CPU-class controller in the engine's life cycle: frequencies and C-states follow the
CPUs the policy gives a class (a balloon type's `cpuClass`), not single containers; what was
there before is kept in the state file and put back when the enforcer stops."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from enforcer.controllers.base import Difference, Findings, Outcome, Result, Roots, Target
from enforcer.controllers.cpuclass import CpuClassController
from enforcer.decode import ContainerRequest
from enforcer.topology import Topology
from resource_contract.config import Config

NAME = "cpuclass"


class CpuClasses:
    name = NAME

    def __init__(self, sysfs_root: str | None, topology: Topology | None) -> None:
        self.sysfs_root = sysfs_root
        self.topology = topology
        self.ctl: CpuClassController | None = None
        self._remembered: dict[str, str] = {}
        self._applied: dict[int, str] | None = None

    @classmethod
    def for_node(cls, roots: Roots, topology: Topology | None = None) -> CpuClasses:
        return cls(roots.sysfs, topology)

    # -- configuration ---------------------------------------------------------------------

    @staticmethod
    def syntax(config: Config) -> list[str]:
        return []  # the schema checks cpuClasses and the types that name them

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

    def validate(self, config: Config) -> None:
        return None

    def configure(self, config: Config) -> list[str]:
        if self.ctl is None:
            if self.sysfs_root is None or self.topology is None:
                return []
            self.ctl = CpuClassController(
                self.sysfs_root, self.topology, config.cpuClasses, remembered=self._remembered
            )
            return []
        # Written by the next `cpus`, after the engine has saved what `remember` read.
        self.ctl.configure(config.cpuClasses, write=False)
        self._applied = None
        return []

    # -- containers: CPU classes follow CPUs, see `cpus` -----------------------------------

    def admit(self, request: ContainerRequest) -> ContainerRequest:
        return request

    def _by_cpus(self) -> Outcome:
        return Outcome(self.name, Result.SKIPPED, detail="CPU classes follow the CPUs")

    def start(self, target: Target) -> Outcome:
        return self._by_cpus()

    def update(self, target: Target) -> Outcome:
        return self._by_cpus()

    def repin(self, target: Target) -> Outcome:
        return self._by_cpus()

    def stop(self, target: Target) -> Outcome:
        return self._by_cpus()

    def verify(self, target: Target) -> Difference | None:
        return None

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

    def saved(self) -> dict[str, Any]:
        remembered = self.ctl.remembered if self.ctl is not None else self._remembered
        return {"remembered": dict(remembered)} if remembered else {}

    def restore(self, saved: Mapping[str, Any]) -> None:
        """Values remembered by a process that did not stop cleanly: the originals."""
        found = saved.get("remembered")
        if not isinstance(found, Mapping):
            return
        values = {str(k): str(v) for k, v in found.items() if isinstance(v, (str, int))}
        target = self.ctl.remembered if self.ctl is not None else self._remembered
        for key, value in values.items():
            target.setdefault(key, value)

    def shutdown(self) -> None:
        if self.ctl is not None:
            self.ctl.restore_all()
            self._applied = None
