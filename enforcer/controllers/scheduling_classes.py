"""The scheduling-class controller in the engine's life cycle: a container's class (its
annotation's, else its balloon type's `schedulingClass`) written to every one of its threads
once it runs, to threads forked later by the verification sweep, and taken back (the kernel's
defaults) when the class is dropped or the container released; `cpuBurst` as the cgroup v2
`cpu.max.burst` of its cgroup."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable

from enforcer.controllers import cgroup2_qos, task_sched
from enforcer.controllers.base import (
    Difference,
    Findings,
    Outcome,
    PerContainer,
    Result,
    Roots,
    Target,
)
from enforcer.controllers.cgroups import cgroup_version, task_cgroup_dir, task_ids
from enforcer.decode import ContainerRequest
from resource_contract.config import Config, ConfigError
from resource_contract.task_classes import SchedulingClass

NAME = "scheduling"
_SHOWN = 3  # threads named in a message


def balloon_type(config: Config, target: Target) -> str | None:
    """The name of the balloon type the policy put the container in, or None."""
    if config.policy.name != "balloons" or target.balloon is None:
        return None
    return target.balloon.partition("[")[0]


class SchedulingClasses(PerContainer):
    name = NAME

    def __init__(self, cgroupfs_root: str) -> None:
        self.root = cgroupfs_root
        self.config = Config()
        self._applied: dict[str, SchedulingClass] = {}  # container id -> what was written

    @classmethod
    def for_node(cls, roots: Roots) -> SchedulingClasses:
        return cls(roots.cgroupfs or "/sys/fs/cgroup")

    # -- configuration ---------------------------------------------------------------------

    @staticmethod
    def syntax(config: Config) -> list[str]:
        return []  # the schema checks the classes, their names and their access rules

    def check(self, config: Config, *, left_out: frozenset[str] = frozenset()) -> Findings:
        found = Findings()
        if os.path.isdir(self.root):
            found.problems += cgroup2_qos.v1_problems(self.root, config.schedulingClasses, {})
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

    def wanted(self, target: Target) -> tuple[str, SchedulingClass] | None:
        """The class the container should run in now, by name, or None."""
        name = target.request.scheduling_class
        btype = balloon_type(self.config, target)
        if name is None and btype is not None:
            found = next((b for b in self.config.policy.balloonTypes if b.name == btype), None)
            name = found.schedulingClass if found is not None else None
        cls = self.config.schedulingClasses.get(name) if name is not None else None
        return (name, cls) if name is not None and cls is not None else None

    def admit(self, request: ContainerRequest) -> ContainerRequest:
        return request  # decoding checked the name and the namespace's access

    def _threads(self, target: Target) -> list[int]:
        folder = task_cgroup_dir(target.cgroup_parent, target.container_id, self.root)
        return task_ids(folder)

    def _v2(self, target: Target) -> str | None:
        if cgroup_version(self.root) != 2:
            return None
        return cgroup2_qos.folder(self.root, target.cgroup_parent, target.container_id)

    def start(self, target: Target) -> Outcome:
        wanted = self.wanted(target)
        previous = self._applied.get(target.container_id)
        if wanted is None:
            if previous is None:
                return Outcome(self.name, Result.SKIPPED)
            return self.stop(target)
        name, cls = wanted
        try:
            if previous is not None and previous != cls:
                self._reset(target, previous)
            refused = self._each_thread(target, cls, task_sched.apply)
            burst = cls.burst_cpus()
            folder = self._v2(target)
            warnings = []
            if burst is not None and folder is not None:
                value = cgroup2_qos.burst_value(folder, burst)
                if value is None:
                    warnings.append(f"scheduling class {name} cpuBurst: no CPU limit to burst over")
                else:
                    cgroup2_qos.write_burst(folder, value)
        except OSError as exc:
            return Outcome(self.name, Result.FAILED, name, str(exc))
        self._applied[target.container_id] = cls
        if refused:
            return Outcome(self.name, Result.FAILED, name, refused)
        return Outcome(self.name, Result.APPLIED, name, warnings=tuple(warnings))

    def _each_thread(
        self, target: Target, cls: SchedulingClass, write: Callable[[int, SchedulingClass], None]
    ) -> str:
        """Writes every thread of the container; what the kernel refused, or ""."""
        refused: list[str] = []
        for tid in self._threads(target):
            try:
                write(tid, cls)
            except task_sched.ThreadGone:
                continue
            except OSError as exc:
                refused.append(f"thread {tid}: {exc.strerror or exc}")
        if not refused:
            return ""
        hint = ""
        if cls.policy in ("fifo", "rr") and cgroup_version(self.root) == 1:
            hint = (
                " (a real-time policy needs real-time runtime in the container's cpu cgroup: "
                "cpu.rt_runtime_us, which is 0 for kubelet's cgroups)"
            )
        more = f" and {len(refused) - _SHOWN} more" if len(refused) > _SHOWN else ""
        return f"the kernel refused {', '.join(refused[:_SHOWN])}{more}{hint}"

    def _reset(self, target: Target, cls: SchedulingClass) -> None:
        self._each_thread(target, cls, task_sched.reset)
        folder = self._v2(target)
        if cls.cpuBurst is not None and folder is not None:
            cgroup2_qos.reset_burst(folder)

    def update(self, target: Target) -> Outcome:
        return self.start(target)

    def repin(self, target: Target) -> Outcome:
        return Outcome(self.name, Result.SKIPPED)  # a class does not depend on the CPUs

    def stop(self, target: Target) -> Outcome:
        """Released: threads still alive (a container stopped while others share its cgroup,
        or a class dropped) get the kernel's defaults back for what the class set."""
        previous = self._applied.pop(target.container_id, None)
        if previous is None:
            return Outcome(self.name, Result.SKIPPED)
        # The cgroup may be gone with the container: nothing left to put back then.
        with contextlib.suppress(OSError):
            self._reset(target, previous)
        return Outcome(self.name, Result.SKIPPED, detail="restored the kernel's defaults")

    def verify(self, target: Target) -> Difference | None:
        """Threads whose values differ from the class: forked after the class was written
        (the runtime's exec does not inherit it), or changed by someone else."""
        wanted = self.wanted(target)
        if wanted is None:
            return None
        name, cls = wanted
        seen: list[str] = []
        try:
            threads = self._threads(target)
        except OSError:
            return None  # the container is going away; its stop says so
        for tid in threads:
            try:
                found = task_sched.differences(cls, task_sched.read(tid))
            except (task_sched.ThreadGone, OSError):
                continue
            if found:
                seen.append(f"thread {tid}: {', '.join(found)}")
        folder = self._v2(target)
        burst = cls.burst_cpus()
        if burst is not None and folder is not None:
            with contextlib.suppress(OSError):
                want = cgroup2_qos.burst_value(folder, burst)
                have = cgroup2_qos.read_burst(folder)
                if want is not None and want != have:
                    seen.append(f"{cgroup2_qos.BURST_FILE} {have} (want {want})")
        if not seen:
            return None
        more = f" and {len(seen) - _SHOWN} more" if len(seen) > _SHOWN else ""
        return Difference(
            self.name,
            f"scheduling class {name}: {'; '.join(seen[:_SHOWN])}{more}",
            seen=tuple(seen),
        )
