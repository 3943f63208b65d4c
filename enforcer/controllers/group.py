"""The registered controllers called as one: configuration validated by all before any writes,
a request admitted through each, a life-cycle point fanned out to every one."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from enforcer.controllers.base import Controller, Difference, Findings, Outcome, Target
from enforcer.decode import ContainerRequest
from enforcer.topology import CPUSet
from resource_contract.config import Config, ConfigError


class Controllers:
    def __init__(self, controllers: Iterable[Controller]) -> None:
        self._all = list(controllers)
        names = [c.name for c in self._all]
        if len(set(names)) != len(names):
            raise ValueError(f"controllers registered twice: {names}")

    def __iter__(self) -> Iterator[Controller]:
        return iter(self._all)

    def get(self, name: str) -> Controller | None:
        return next((c for c in self._all if c.name == name), None)

    def check(self, config: Config, *, left_out: frozenset[str] = frozenset()) -> Findings:
        found = Findings()
        for controller in self._all:
            found.extend(controller.check(config, left_out=left_out))
        return found

    def configure(self, config: Config) -> list[str]:
        """Every controller's section validated first, then kept and written; ConfigError
        before anything is written when one is refused."""
        problems: list[str] = []
        for controller in self._all:
            try:
                controller.validate(config)
            except ConfigError as exc:  # every controller's problems, not the first one's
                problems += [p for p in exc.problems if p not in problems]
        if problems:
            raise ConfigError(problems)
        warnings: list[str] = []
        for controller in self._all:
            warnings += controller.configure(config)
        return warnings

    def admit(self, request: ContainerRequest) -> ContainerRequest:
        for controller in self._all:
            request = controller.admit(request)
        return request

    def start(self, target: Target) -> list[Outcome]:
        return [controller.start(target) for controller in self._all]

    def update(self, target: Target) -> list[Outcome]:
        return [controller.update(target) for controller in self._all]

    def repin(self, target: Target) -> list[Outcome]:
        return [controller.repin(target) for controller in self._all]

    def stop(self, target: Target) -> list[Outcome]:
        return [controller.stop(target) for controller in self._all]

    def exclusive(self, cpus: CPUSet) -> None:
        """The CPUs containers hold exclusively now, to the controllers that follow them (IRQ
        isolation), before each `remember` / `cpus` round."""
        for controller in self._all:
            follow = getattr(controller, "exclusive", None)
            if callable(follow):
                follow(cpus)

    def remember(self, classes: Mapping[int, str]) -> bool:
        changed = [controller.remember(classes) for controller in self._all]
        return any(changed)

    def cpus(self, classes: Mapping[int, str]) -> bool:
        changed = [controller.cpus(classes) for controller in self._all]
        return any(changed)

    def saved(self) -> dict[str, Any]:
        """What each controller must remember across a crash, by name (empty ones left out)."""
        found = {controller.name: controller.saved() for controller in self._all}
        return {name: value for name, value in found.items() if value}

    def restore(self, saved: Mapping[str, Any]) -> None:
        for controller in self._all:
            value = saved.get(controller.name)
            if isinstance(value, Mapping):
                controller.restore(value)

    def shutdown(self) -> None:
        for controller in self._all:
            controller.shutdown()

    def verify(self, target: Target) -> list[Difference]:
        found = (controller.verify(target) for controller in self._all)
        return [d for d in found if d is not None]
