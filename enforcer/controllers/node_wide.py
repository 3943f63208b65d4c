"""The shared part of the controllers that act on the node, not on single containers (CPU
classes, IRQ isolation): nothing to do per container, since what they write follows the CPUs
(see `cpus`), and the original values they will put back kept in the state file under one key."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from enforcer.controllers.base import Difference, Outcome, Result, Target
from enforcer.decode import ContainerRequest
from resource_contract.config import Config


class NodeWide:
    """Subclasses set `name`, `follows` (why a container is skipped) and `saved_key`, and keep
    the originals in the dict `kept_originals()` returns."""

    name: str
    follows: str  # the detail of every per-container outcome
    saved_key: str  # the key of the originals in `saved`

    # -- what a subclass says --------------------------------------------------------------

    def kept_originals(self) -> dict[str, str]:
        """The values this controller will put back, by what it changed (mutable)."""
        raise NotImplementedError

    def restored(self, key: Any, value: Any) -> tuple[str, str] | None:
        """One original read back from a state file, as it is kept; None when it is not one."""
        raise NotImplementedError

    # -- configuration ---------------------------------------------------------------------

    @staticmethod
    def syntax(config: Config) -> list[str]:
        return []  # the schema checks the section

    def validate(self, config: Config) -> None:
        return None

    # -- the state file --------------------------------------------------------------------

    def saved(self) -> dict[str, Any]:
        originals = self.kept_originals()
        return {self.saved_key: dict(originals)} if originals else {}

    def restore(self, saved: Mapping[str, Any]) -> None:
        """Originals remembered by a process that did not stop cleanly, for what this one has
        not remembered itself."""
        found = saved.get(self.saved_key)
        if not isinstance(found, Mapping):
            return
        originals = self.kept_originals()
        for key, value in found.items():
            kept = self.restored(key, value)
            if kept is not None:
                originals.setdefault(*kept)

    # -- containers: what these controllers write follows the CPUs -------------------------

    def admit(self, request: ContainerRequest) -> ContainerRequest:
        return request

    def _by_cpus(self) -> Outcome:
        return Outcome(self.name, Result.SKIPPED, detail=self.follows)

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
