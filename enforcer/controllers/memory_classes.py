"""The memory-class controller in the engine's life cycle (cgroup v2 only): a container's class
(its annotation's, else its balloon type's `memoryClass`) written to its cgroup's memory.min,
memory.low, memory.high and memory.swap.max once it runs and whenever its limit or the class
changes, read back by the verification sweep, the kernel's defaults put back when the class is
dropped. On cgroup v1 a configuration with memory classes is refused when it is read."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

from enforcer.controllers import cgroup2_qos
from enforcer.controllers.base import Difference, Outcome, Result, Target
from enforcer.controllers.task_classes import TaskClasses
from enforcer.decode import ContainerRequest
from resource_contract.config import Config
from resource_contract.policy_config import BalloonType
from resource_contract.task_classes import MemoryClass

NAME = "memory"


class MemoryClasses(TaskClasses[MemoryClass]):
    name = NAME

    def __init__(self, cgroupfs_root: str) -> None:
        super().__init__(cgroupfs_root)
        self._applied: dict[str, list[str]] = {}  # container id -> the files written

    def classes(self, config: Config) -> Mapping[str, MemoryClass]:
        return config.memoryClasses

    def requested(self, request: ContainerRequest) -> str | None:
        return request.memory_class

    def of_balloon_type(self, btype: BalloonType) -> str | None:
        return btype.memoryClass

    def v1_problems(self, config: Config) -> list[str]:
        return cgroup2_qos.v1_problems(self.root, {}, config.memoryClasses)

    # -- containers ------------------------------------------------------------------------

    def _folder(self, target: Target) -> str:
        return cgroup2_qos.folder(self.root, target.cgroup_parent, target.container_id)

    def start(self, target: Target) -> Outcome:
        wanted = self.wanted(target)
        if wanted is None:
            return self.stop(target) if target.container_id in self._applied else self._skip()
        name, cls = wanted
        values, warnings = cgroup2_qos.memory_values(cls, target.request.memory_limit)
        folder = self._folder(target)
        try:
            dropped = [f for f in self._applied.get(target.container_id, []) if f not in values]
            cgroup2_qos.reset_memory(folder, dropped)
            cgroup2_qos.write_memory(folder, values)
        except OSError as exc:
            return Outcome(self.name, Result.FAILED, name, f"{folder}: {exc.strerror or exc}")
        self._applied[target.container_id] = list(values)
        return Outcome(self.name, Result.APPLIED, name, warnings=tuple(warnings))

    def _skip(self) -> Outcome:
        return Outcome(self.name, Result.SKIPPED)

    def update(self, target: Target) -> Outcome:
        return self.start(target)  # the limit may have changed: ratios again

    def repin(self, target: Target) -> Outcome:
        return self._skip()

    def stop(self, target: Target) -> Outcome:
        written = self._applied.pop(target.container_id, None)
        if written:
            with contextlib.suppress(OSError):  # the cgroup may be gone with the container
                cgroup2_qos.reset_memory(self._folder(target), written)
        return self._skip()

    def verify(self, target: Target) -> Difference | None:
        wanted = self.wanted(target)
        if wanted is None:
            return None
        name, cls = wanted
        values, _ = cgroup2_qos.memory_values(cls, target.request.memory_limit)
        try:
            have = cgroup2_qos.read_memory(self._folder(target), list(values))
        except OSError:
            return None  # the container is going away; its stop says so
        wrong = [f"{f} {have[f]} (want {v})" for f, v in values.items() if have[f] != v]
        if not wrong:
            return None
        return Difference(self.name, f"memory class {name}: {', '.join(wrong)}", seen=tuple(wrong))
