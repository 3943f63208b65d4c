"""The block-I/O controller in the engine's life cycle: classes checked at creation, written
into the container's cgroup once it runs and again when the class definitions change, the
`blockio` section's devices checked against this node."""

from __future__ import annotations

from dataclasses import replace

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
from enforcer.controllers.blockio.cgroups import BlockIOCgroups
from enforcer.controllers.blockio.devices import compile_classes
from enforcer.controllers.blockio.settings import check_blockio
from enforcer.controllers.errors import ApplyError, ClassError
from enforcer.decode import ContainerRequest
from resource_contract.config import Config, ConfigError

NAME = "blockio"


class BlockIOClasses(PerContainer):
    name = NAME

    def __init__(self, blockio: BlockIOCgroups) -> None:
        self.blockio = blockio

    @classmethod
    def for_node(cls, roots: Roots) -> BlockIOClasses:
        return cls(
            BlockIOCgroups(roots.cgroupfs or "/sys/fs/cgroup", sysfs_root=roots.sysfs or "/sys")
        )

    # -- configuration ---------------------------------------------------------------------

    @staticmethod
    def syntax(config: Config) -> list[str]:
        return check_blockio(config.blockio)

    def check(self, config: Config, *, left_out: frozenset[str] = frozenset()) -> Findings:
        """Device globs against this machine's /dev, whatever the sysfs root: a named
        character device or partition is a problem, a glob matching nothing a warning."""
        found = Findings()
        if config.blockio is None:
            if "blockio" in left_out:
                found.notes.append(
                    "blockio: its devices were not checked until the problems above are fixed"
                )
            return found
        try:
            _, warnings = compile_classes(config.blockio, sysfs_root=self.blockio.sysfs_root)
            found.warnings.extend(warnings)
        except ConfigError as exc:
            found.problems.extend(exc.problems)
        return found

    def validate(self, config: Config) -> None:
        self.blockio.compile(config.blockio)

    def configure(self, config: Config) -> list[str]:
        return self.blockio.configure(config.blockio)

    # -- containers ------------------------------------------------------------------------

    def admit(self, request: ContainerRequest) -> ContainerRequest:
        return admit_class(
            request,
            request.blockio_class,
            request.blockio_explicit,
            self.blockio.check,
            lambda r: replace(r, blockio_class=None),
        )

    def start(self, target: Target) -> Outcome:
        name = target.request.blockio_class
        if name is None:
            return Outcome(self.name, Result.SKIPPED)
        try:
            result = self.blockio.apply(
                name,
                target.cgroup_parent,
                target.container_id,
                explicit=target.request.blockio_explicit,
            )
        except (ClassError, ApplyError, OSError) as exc:
            return Outcome(self.name, Result.FAILED, name, str(exc))
        return Outcome(
            self.name,
            Result.APPLIED if result.applied else Result.SKIPPED,
            name,
            warnings=result.warnings,
        )

    def update(self, target: Target) -> Outcome:
        return self.start(target)  # rewrites every line of the class, resets what it dropped

    def repin(self, target: Target) -> Outcome:
        return Outcome(self.name, Result.SKIPPED)  # a class does not depend on the CPUs

    def stop(self, target: Target) -> Outcome:
        return Outcome(self.name, Result.SKIPPED)  # the runtime removes the cgroup

    def verify(self, target: Target) -> Difference | None:
        # The cgroup files show only some of what was written (v1 keeps no default weight
        # per device), so the periodic sweep rewrites nothing here; `update` does on reloads.
        return None
