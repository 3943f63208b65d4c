"""The scheduling-class controller in the engine's life cycle: a container's class (its
annotation's, else its balloon type's `schedulingClass`) written to every one of its threads
once it runs, to threads forked later by the verification sweep, and taken back (the kernel's
defaults) when the class is dropped or the container released; `cpuBurst` as the cgroup v2
`cpu.max.burst` of its cgroup."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping

from enforcer.controllers import cgroup2_qos, task_sched
from enforcer.controllers.base import Difference, Outcome, Result, Target
from enforcer.controllers.cgroups import cgroup_version, task_cgroup_dir, task_ids
from enforcer.controllers.task_classes import TaskClasses
from enforcer.decode import ContainerRequest
from resource_contract.config import Config
from resource_contract.policy_config import BalloonType
from resource_contract.task_classes import SchedulingClass

NAME = "scheduling"
_SHOWN = 3  # threads named in a message


class SchedulingClasses(TaskClasses[SchedulingClass]):
    name = NAME

    def __init__(self, cgroupfs_root: str) -> None:
        super().__init__(cgroupfs_root)
        self._applied: dict[str, SchedulingClass] = {}  # container id -> what was written

    def classes(self, config: Config) -> Mapping[str, SchedulingClass]:
        return config.schedulingClasses

    def requested(self, request: ContainerRequest) -> str | None:
        return request.scheduling_class

    def of_balloon_type(self, btype: BalloonType) -> str | None:
        return btype.schedulingClass

    def v1_problems(self, config: Config) -> list[str]:
        return cgroup2_qos.v1_problems(self.root, config.schedulingClasses, {})

    # -- containers ------------------------------------------------------------------------

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
