"""The RDT controller in the engine's life cycle: classes checked at creation, tasks moved into
their class once the container runs, the `rdt` section checked against resctrl's hardware."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from enforcer.controllers.base import (
    Difference,
    Findings,
    Outcome,
    PerContainer,
    Result,
    Roots,
    Target,
    admit_class,
)
from enforcer.controllers.cgroups import task_cgroup_dir, task_ids
from enforcer.controllers.errors import ApplyError, ClassError, RdtUnavailable
from enforcer.controllers.rdt.allocation import check_rdt, parse_rdt
from enforcer.controllers.rdt.hardware import read_resctrl_info
from enforcer.controllers.rdt.resctrl_groups import ResctrlGroups
from enforcer.controllers.rdt.schemata import plan_rdt
from enforcer.decode import ContainerRequest
from resource_contract.config import Config, ConfigError

NAME = "rdt"


class RdtClasses(PerContainer):
    name = NAME

    def __init__(
        self, rdt: ResctrlGroups, *, cgroupfs_root: str = "/sys/fs/cgroup", checks_root: bool
    ) -> None:
        self.rdt = rdt
        self.cgroupfs_root = cgroupfs_root
        self._hardware_given = checks_root  # False: check-config was given no --resctrl-root

    @classmethod
    def for_node(cls, roots: Roots) -> RdtClasses:
        return cls(
            ResctrlGroups(roots.resctrl or "/sys/fs/resctrl"),
            cgroupfs_root=roots.cgroupfs or "/sys/fs/cgroup",
            checks_root=roots.resctrl is not None,
        )

    # -- configuration ---------------------------------------------------------------------

    @staticmethod
    def syntax(config: Config) -> list[str]:
        return check_rdt(config.rdt)

    def check(self, config: Config, *, left_out: frozenset[str] = frozenset()) -> Findings:
        found = Findings()
        root = self.rdt.root
        if not self._hardware_given:
            if config.rdt is not None or "rdt" in left_out:
                found.notes.append(
                    "skipped: the rdt section against RDT hardware: give --resctrl-root DIR"
                )
            return found
        if config.rdt is None:
            if "rdt" in left_out:
                found.notes.append(
                    f"rdt: not checked against {root} until the problems above are fixed"
                )
            return found
        try:
            found.warnings.extend(plan_rdt(parse_rdt(config.rdt), read_resctrl_info(root)).warnings)
        except ConfigError as exc:
            found.problems.extend(exc.problems)
        except RdtUnavailable as exc:
            found.problems.append(f"--resctrl-root: {exc}")
        return found

    def validate(self, config: Config) -> None:
        # `configure` checks the whole section against the hardware before it writes.
        if config.rdt is not None:
            parse_rdt(config.rdt)

    def configure(self, config: Config) -> list[str]:
        return self.rdt.configure(config.rdt)

    # -- containers ------------------------------------------------------------------------

    def admit(self, request: ContainerRequest) -> ContainerRequest:
        return admit_class(
            request,
            request.rdt_class,
            request.rdt_explicit,
            self.rdt.check,
            lambda r: replace(r, rdt_class=None),
        )

    def _folder(self, target: Target) -> str:
        return task_cgroup_dir(target.cgroup_parent, target.container_id, self.cgroupfs_root)

    def start(self, target: Target) -> Outcome:
        name = target.request.rdt_class
        if name is None:
            return Outcome(self.name, Result.SKIPPED)
        try:
            moved = self.rdt.assign_cgroup(
                name, self._folder(target), explicit=target.request.rdt_explicit
            )
        except (ClassError, ApplyError, OSError) as exc:
            return Outcome(self.name, Result.FAILED, name, str(exc))
        return Outcome(self.name, Result.APPLIED if moved else Result.SKIPPED, name)

    def update(self, target: Target) -> Outcome:
        return self.start(target)  # the class's schemata were rewritten by `configure`

    def repin(self, target: Target) -> Outcome:
        return Outcome(self.name, Result.SKIPPED)  # a class does not depend on the CPUs

    def stop(self, target: Target) -> Outcome:
        # The kernel drops a task from its group when it exits; empty groups of classes no
        # longer configured are removed by `configure`'s prune.
        return Outcome(self.name, Result.SKIPPED)

    def verify(self, target: Target) -> Difference | None:
        """Tasks of the container outside its class's group (forked before it was moved)."""
        name = target.request.rdt_class
        if name is None or not self.rdt.available or name not in self.rdt.classes:
            return None
        try:
            group = self.rdt.group_dir(name)
            members = _ids(group / "tasks")
            outside = sorted(set(task_ids(self._folder(target))) - members)
        except (OSError, ClassError):
            return None  # gone, or nothing to compare with: `start` reports what failed
        if not outside:
            return None
        shown = ", ".join(map(str, outside[:8])) + (" ..." if len(outside) > 8 else "")
        return Difference(self.name, f"tasks {shown} are outside RDT class {name}")


def _ids(path: Path) -> set[int]:
    with open(path) as f:
        return {int(line) for line in f if line.strip()}
