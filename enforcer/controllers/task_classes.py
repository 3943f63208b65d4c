"""The shared part of the scheduling- and memory-class controllers: a class picked per container
by name (its annotation's, else its balloon type's), checked against cgroup v1 when the
configuration is read, kept with the configuration. Each subclass says where its classes and its
balloon types' references are, and writes its class its own way."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Generic, Self, TypeVar

from enforcer.controllers.base import Findings, PerContainer, Roots, Target
from enforcer.decode import ContainerRequest
from resource_contract.config import Config, ConfigError
from resource_contract.policy_config import BalloonType

C = TypeVar("C")  # the configuration's model of one class


def balloon_type(config: Config, target: Target) -> str | None:
    """The name of the balloon type the policy put the container in, or None."""
    if config.policy.name != "balloons" or target.balloon is None:
        return None
    return target.balloon.partition("[")[0]


class TaskClasses(PerContainer, Generic[C]):
    """A per-container class controller over the cgroup filesystem at `cgroupfs_root`."""

    name: str

    def __init__(self, cgroupfs_root: str) -> None:
        self.root = cgroupfs_root
        self.config = Config()

    @classmethod
    def for_node(cls, roots: Roots) -> Self:
        return cls(roots.cgroupfs or "/sys/fs/cgroup")

    # -- what a subclass says --------------------------------------------------------------

    def classes(self, config: Config) -> Mapping[str, C]:
        """The configured classes of this controller's kind, by name."""
        raise NotImplementedError

    def requested(self, request: ContainerRequest) -> str | None:
        """The class the container's annotations name, or None."""
        raise NotImplementedError

    def of_balloon_type(self, btype: BalloonType) -> str | None:
        """The class a balloon type names for its containers, or None."""
        raise NotImplementedError

    def v1_problems(self, config: Config) -> list[str]:
        """What a cgroup v1 hierarchy at the root cannot do of this kind's classes."""
        raise NotImplementedError

    # -- configuration ---------------------------------------------------------------------

    @staticmethod
    def syntax(config: Config) -> list[str]:
        return []  # the schema checks the classes, their names and their access rules

    def check(self, config: Config, *, left_out: frozenset[str] = frozenset()) -> Findings:
        found = Findings()
        if os.path.isdir(self.root):
            found.problems += self.v1_problems(config)
        return found

    def validate(self, config: Config) -> None:
        problems = self.check(config).problems
        if problems:
            raise ConfigError(problems)

    def configure(self, config: Config) -> list[str]:
        self.validate(config)
        self.config = config
        return []

    # -- containers ------------------------------------------------------------------------

    def wanted(self, target: Target) -> tuple[str, C] | None:
        """The class the container should have now, by name, or None."""
        name = self.requested(target.request)
        btype = balloon_type(self.config, target)
        if name is None and btype is not None:
            found = next((b for b in self.config.policy.balloonTypes if b.name == btype), None)
            name = self.of_balloon_type(found) if found is not None else None
        cls = self.classes(self.config).get(name) if name is not None else None
        return (name, cls) if name is not None and cls is not None else None

    def admit(self, request: ContainerRequest) -> ContainerRequest:
        return request  # decoding checked the name and the namespace's access
