"""Verification and repair: what the kernel has for a running container, read back from every
controller and compared with the decision; a difference repaired (the cpuset through the
runtime, a class by applying it again) and read again. Runs on the engine's worker.
"""

from __future__ import annotations

from enforcer.controllers.base import Difference, Target
from enforcer.engine.model import Entry, Phase, Pinning
from enforcer.engine.repin import Repinner
from enforcer.engine.shared import Shared, log


class Verifier:
    def __init__(self, shared: Shared, repinner: Repinner) -> None:
        self.s = shared
        self.repinner = repinner

    def verify(self, entry: Entry) -> bool:
        """Reads back what the kernel has for a running container from every controller and
        repairs a difference (the cpuset through the runtime, classes by applying them again).
        Returns whether it now matches its decision."""
        s = self.s
        if s.controllers is None:
            return True
        target = s.target(entry)
        if target is None:
            return True
        differences = s.controllers.verify(target)
        if not differences:
            s.registry.set_problem(entry.key, None, verified=True)
            return True
        name = s.name(entry.key)
        problems = []
        for difference in differences:
            log.warning(
                "%s (container %s): %s %s: repairing",
                name,
                target.container_id,
                difference.controller,
                difference.detail,
            )
            if difference.by_runtime:
                s.metrics.repairs.inc()  # cpuset repairs; a class's count as applications
            left = self._repair(entry, target, difference)
            if left is not None:
                problems.append(left)
        if not problems:
            s.registry.set_problem(entry.key, None, verified=True)
            return True
        problem = "; ".join(problems)
        s.registry.set_problem(entry.key, problem)
        s.metrics.unrepaired.inc()
        log.error("%s (container %s): %s", name, target.container_id, problem)
        return False

    def _repair(self, entry: Entry, target: Target, difference: Difference) -> str | None:
        """Repairs one difference and reads again; what is still wrong, or None."""
        s = self.s
        controller = s.controllers.get(difference.controller) if s.controllers else None
        if controller is None:
            return None
        if difference.by_runtime:
            wanted = Pinning(target.cpus, target.mems)
            if self.repinner.apply(entry, target.container_id, wanted):
                again = controller.verify(target)
                if again is None:
                    s.registry.set_applied(entry.key, wanted.cpus, wanted.mems, verified=True)
                    return None
                difference = again
            seen = difference.seen[0] if difference.seen else "?"
            return f"cannot repair: the kernel has cpus={seen}, decided cpus={target.cpus}"
        s.record([controller.start(target)], target.container_id)
        again = controller.verify(target)
        if again is None:
            return None
        return f"cannot repair {again.controller}: {again.detail}"

    def sweep(self) -> None:
        """Verifies every running container (the periodic check)."""
        for entry in list(self.s.registry.entries.values()):
            if entry.phase is Phase.RUNNING:
                self.verify(entry)
