"""One fault kind's world: the session's containerd, an enforcer of its own (the real console
script, static policy), the emulated kubelet through the relay, the truth reader, the checks
and the figures; started and torn down by the `fault_env` fixture (tests/faults/conftest.py).

The CPUs: every CPU but the highest is reserved, so exactly one CPU (CPU 1 on the 2-CPU
machines this runs on) can be held exclusively; several Guaranteed 1-CPU pods compete for it
and all but one are refused while it is held. Shared containers run on the reserved CPUs, and
on the free one while nobody holds it.
"""

from __future__ import annotations

import contextlib
import random
import signal
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from enforcer.topology import CPUSet
from tests.faults.figures import OTHER, KindFigures
from tests.faults.invariants import Checker
from tests.faults.node import Node, Relister
from tests.faults.settings import SETTINGS
from tests.faults.truth import Truth, online_cpus
from tests.support.containerd import Leftovers, PrivateContainerd
from tests.support.enforcer_process import EnforcerError, EnforcerProcess
from tests.support.kubelet_sends import BEST_EFFORT, BURSTABLE

START_TIMEOUT = 30.0


@dataclass
class FaultEnv:
    kind: str
    figures: KindFigures
    rng: random.Random
    containerd: PrivateContainerd
    enforcer: EnforcerProcess
    config_path: Path
    online: CPUSet
    reserved: CPUSet
    node: Node
    truth: Truth
    checker: Checker
    relister: Relister
    cleanups: list[Callable[[], None]] = field(default_factory=list)

    def write_config(self, reserved: CPUSet) -> None:
        """The configuration file: static policy, these CPUs reserved (read at start, and
        reloaded by a running enforcer when it changes)."""
        self.reserved = reserved
        self.config_path.write_text(f'policy: {{name: static, reservedCPUs: "{reserved}"}}\n')

    def start_enforcer(self, stage: str) -> bool:
        """Starts the enforcer on its state folder, as the DaemonSet would; False (and a
        violation) when it does not become a CRI endpoint."""
        try:
            self.enforcer.start(timeout=START_TIMEOUT)
            return True
        except EnforcerError as exc:
            first = str(exc).splitlines()[0] if str(exc) else "?"
            self.figures.violation(
                OTHER,
                f"endpoint@{stage}",
                f"{stage}: the enforcer is no CRI endpoint within {START_TIMEOUT:.0f}s: {first} "
                f"last log lines: {self.log_lines(3)}",
            )
            with contextlib.suppress(Exception):
                self.enforcer.stop(signal.SIGKILL)
            return False

    def log_lines(self, count: int) -> str:
        """The enforcer's last log lines above DEBUG, joined."""
        lines = [ln for ln in self.enforcer.log_tail(400).splitlines() if " DEBUG " not in ln]
        return " | ".join(lines[-count:])

    def restart_enforcer(
        self, stage: str, *, kill: bool, between: Callable[[], None] | None = None
    ) -> bool:
        """kill -9 (or SIGTERM) and start again on the same state folder; `between` runs while
        no enforcer runs."""
        self.enforcer.stop(signal.SIGKILL if kill else signal.SIGTERM)
        if between is not None:
            between()
        return self.start_enforcer(stage)

    def ensure_enforcer(self, stage: str) -> None:
        """An enforcer that did not come back is started once more; the test cannot go on
        without one."""
        proc = self.enforcer.proc
        if proc is not None and proc.poll() is None:
            return
        if not self.start_enforcer(f"{stage}, second start"):
            pytest.fail(self.report(f"the enforcer cannot be started again ({stage})"), False)

    def start_sentinels(self) -> None:
        """A BestEffort and a Burstable pod that run all along: the shared pool always has
        containers to check."""
        for qos in (BEST_EFFORT, BURSTABLE):
            outcome = self.node.start_pod(self.node.manifest_for(qos, "sentinel-"))
            if outcome.pod is None:
                pytest.fail(
                    self.report(f"a {qos} pod cannot start: {outcome.code}: {outcome.details}"),
                    False,
                )
            self.node.sentinels.add(outcome.pod.name)

    def stop_injecting(self) -> bool:
        """True once this kind has found enough violations: each further one costs a settle
        wait, and the verdict is already known."""
        if self.figures.total_violations >= SETTINGS.max_violations:
            self.figures.stopped_early = True
            return True
        return False

    def report(self, headline: str = "") -> str:
        parts = [headline] if headline else []
        parts.append(self.figures.report())
        if self.checker.last_status:
            parts.append("last `resource-enforcer status`:\n" + self.checker.last_status)
        parts.append("enforcer log (tail):\n" + self.enforcer.log_tail(40))
        return "\n\n".join(parts)

    def finish(self) -> None:
        """A last settled check of everything, then the verdict: no violation of any kind."""
        if not self.figures.stopped_early:
            self.ensure_enforcer("end")
            for problem in self.node.catch_up():  # kubelet's removals and GC must end
                self.figures.violation(OTHER, f"end: {problem}", f"at the end: {problem}")
            self.checker.settle("at the end")
        self.figures.finish()
        if self.figures.total_violations:
            pytest.fail(self.report(f"{self.kind}: violations found"), pytrace=False)

    def close(self) -> None:
        if not self.figures.seconds:
            self.figures.finish()
        self.relister.stop()
        self.node.close()
        with contextlib.suppress(Exception):
            self.enforcer.stop()
        self.truth.close()
        if not self.containerd.running():
            self.containerd.start()
        with contextlib.suppress(Exception):
            count_leftovers(self.figures, self.containerd.remove_all_pods(), "after")
        for cleanup in reversed(self.cleanups):
            with contextlib.suppress(Exception):
                cleanup()


def count_leftovers(figures: KindFigures, left: Leftovers, when: str) -> None:
    """Containers that only went once their tasks were deleted, by the cleanup before or after
    a kind: containerd#11037's counted, any other warned of by name."""
    figures.stuck_tasks += len(left.stuck)
    if left.other:
        warnings.warn(
            f"{figures.kind}: containers whose tasks CRI could not remove {when} the run, "
            f"removed with `ctr task rm -f`: {', '.join(left.other)}",
            stacklevel=2,
        )


def make_env(
    containerd: PrivateContainerd,
    workdir: Path,
    figures: KindFigures,
    *,
    prepare_state_dir: Callable[[Path], Callable[[], None]] | None = None,
) -> FaultEnv:
    """Builds and starts one kind's world (the caller closes it)."""
    if not containerd.running():
        containerd.start()
    count_leftovers(figures, containerd.remove_all_pods(), "before")
    online = online_cpus()
    reserved = online - CPUSet.of(max(online))
    config_path = workdir / "config.yaml"
    enforcer = EnforcerProcess(
        workdir / "enforcer", runtime_socket=containerd.socket, config=str(config_path)
    )
    cleanups: list[Callable[[], None]] = []
    if prepare_state_dir is not None:
        state_dir = Path(enforcer.state_dir)
        state_dir.mkdir(parents=True, exist_ok=True)
        cleanups.append(prepare_state_dir(state_dir))
    truth = Truth(containerd.address)
    node = Node(enforcer.relay_socket, workdir / "pods", figures, containerd.delete_task)
    checker = Checker(truth, enforcer.state_dir, figures, SETTINGS, online)
    env = FaultEnv(
        kind=figures.kind,
        figures=figures,
        rng=random.Random(f"{SETTINGS.seed}/{figures.kind}"),
        containerd=containerd,
        enforcer=enforcer,
        config_path=config_path,
        online=online,
        reserved=reserved,
        node=node,
        truth=truth,
        checker=checker,
        relister=Relister(node),
        cleanups=cleanups,
    )
    env.write_config(reserved)
    return env
