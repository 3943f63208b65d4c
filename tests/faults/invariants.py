"""The checks made after every fault, from the runtime and the kernel (tests.faults.truth):

1. **Exclusivity.** A running Guaranteed container (every one in this suite asks for one whole
   CPU) runs on exactly one CPU, and that CPU is in no other running container's cgroup cpuset.
   Two running Guaranteed containers sharing a CPU count at once, in any look (that is never
   right, not even for a moment); a shared container still overlapping one counts only after
   the settle time (a re-pin may be on its way).
2. **No leaked hold.** Once kubelet has removed every Guaranteed pod and containerd lists no
   container of a Guaranteed pod in any state, a new Guaranteed pod gets a CPU of its own
   within `FAULTS_LEAK_SECONDS` (kubelet retrying a refusal, and relisting, meanwhile).
3. **Every cgroup as decided.** After the settle time, every running shared (Burstable,
   BestEffort) container's cpuset is the shared pool: the online CPUs minus those of running
   Guaranteed containers; and `resource-enforcer status` lists every running container, with
   no re-pin pending and with exactly the CPUs its cgroup has.

A container found wrong at the first look of a check and right at the end, same container
(no restart), counts as a repair observed.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

import grpc

from enforcer.cri import api_pb2
from enforcer.topology import CPUSet
from tests.faults.figures import DOUBLE, LEAK, OTHER, UNREPAIRED, UNTRACKED, KindFigures
from tests.faults.node import Node
from tests.faults.settings import Settings
from tests.faults.status_table import Status, StatusError, read_status
from tests.faults.truth import Seen, Truth
from tests.support.kubelet import RunningPod
from tests.support.kubelet_sends import GUARANTEED

LOOK_PAUSE = 0.3


@dataclass(frozen=True)
class Problem:
    category: str
    identity: str  # the same problem seen again is not counted twice
    message: str
    container: str | None = None  # the container whose cgroup is wrong, if one is


def _union(sets: list[CPUSet]) -> CPUSet:
    out: set[int] = set()
    for s in sets:
        out |= s
    return CPUSet(out)


def guaranteed_overlaps(
    seen: list[Seen], shared_guaranteed: frozenset[str] = frozenset()
) -> list[Problem]:
    """Two running Guaranteed containers on one CPU: never right, not even for a moment."""
    running = [s for s in seen if s.running and holds(s, shared_guaranteed)]
    problems = []
    for i, a in enumerate(running):
        for b in running[i + 1 :]:
            assert a.cpus is not None and b.cpus is not None
            if common := a.cpus & b.cpus:
                pair = "+".join(sorted((a.id, b.id)))
                problems.append(
                    Problem(
                        DOUBLE,
                        pair,
                        f"CPU {common} held by two running Guaranteed containers: "
                        f"{a.label} on {a.cpus} and {b.label} on {b.cpus}",
                    )
                )
    return problems


def holds(s: Seen, shared_guaranteed: frozenset[str]) -> bool:
    """Whether a running container must hold its CPU alone: a Guaranteed one, unless the
    enforcer put it on the shared pool (ids in `shared_guaranteed`, from `status`)."""
    return s.qos == GUARANTEED and s.id not in shared_guaranteed


def waiting_holds(seen: list[Seen]) -> list[CPUSet]:
    """CPUs of Guaranteed containers that exist but do not run (created, or in an unknown
    state after a restart of containerd): they start on their spec's CPUs, so those stay
    theirs and out of the shared pool until the runtime says the container is gone."""
    return [
        s.spec_cpus
        for s in seen
        if s.qos == GUARANTEED
        and s.spec_cpus
        and s.state in (api_pb2.CONTAINER_CREATED, api_pb2.CONTAINER_UNKNOWN)
    ]


def model_problems(
    seen: list[Seen], online: CPUSet, shared_guaranteed: frozenset[str] = frozenset()
) -> list[Problem]:
    """Checks 1 and the cgroup half of 3, from the runtime and the cgroups alone.

    `shared_guaranteed`: Guaranteed containers that the enforcer decided to run on the shared
    pool (when no CPU is left to hold alone, e.g. every CPU reserved); they are checked as
    shared containers."""
    running = [s for s in seen if s.running]
    guaranteed = [s for s in running if holds(s, shared_guaranteed)]
    held = _union([g.cpus for g in guaranteed if g.cpus is not None] + waiting_holds(seen))
    problems = []
    for g in guaranteed:
        assert g.cpus is not None
        if len(g.cpus) != 1:
            problems.append(
                Problem(
                    UNREPAIRED,
                    g.id,
                    f"{g.label} runs on CPUs {g.cpus}, not on one CPU of its own",
                    g.id,
                )
            )
        for other in running:
            if other is g or holds(other, shared_guaranteed):
                continue  # pairs of Guaranteed containers: guaranteed_overlaps
            assert other.cpus is not None
            if common := g.cpus & other.cpus:
                problems.append(
                    Problem(
                        DOUBLE,
                        "+".join(sorted((g.id, other.id))),
                        f"CPU {common} of {g.label} is also in the cpuset of {other.label} "
                        f"({other.cpus})",
                        other.id,
                    )
                )
    pool = online - held
    for s in running:
        if holds(s, shared_guaranteed):
            continue
        if s.cpus != pool:
            problems.append(
                Problem(
                    UNREPAIRED,
                    s.id,
                    f"{s.label} runs on {s.cpus}; the shared pool is {pool or 'empty'} "
                    f"(online {online} minus {held or 'nothing'} held by Guaranteed containers, "
                    "running or created)",
                    s.id,
                )
            )
    return problems


def status_problems(seen: list[Seen], status: Status) -> list[Problem]:
    """The `status` half of check 3: every running container listed, as its cgroup is."""
    problems = []
    for s in seen:
        if not s.running:
            continue
        row = status.row_of(s.id)
        if row is None:
            problems.append(
                Problem(
                    UNTRACKED,
                    s.id,
                    f"{s.label} runs on {s.cpus} but `resource-enforcer status` has no row "
                    "with its id",
                )
            )
        elif row.decided is None:
            problems.append(
                Problem(UNTRACKED, s.id, f"{s.label}: `status` shows no CPUs decided for it")
            )
        elif row.applied != row.decided:
            problems.append(
                Problem(
                    UNREPAIRED,
                    s.id,
                    f"{s.label}: `status` shows a re-pin still pending: applied "
                    f"{row.applied}, decided {row.decided} (its cgroup has {s.cpus})",
                    s.id,
                )
            )
        elif row.decided != s.cpus:
            problems.append(
                Problem(
                    UNREPAIRED,
                    s.id,
                    f"{s.label}: its cgroup has CPUs {s.cpus}, the enforcer decided "
                    f"{row.decided} (`status`: {row.kind})",
                    s.id,
                )
            )
    return problems


def shared_decided(seen: list[Seen], status: Status) -> frozenset[str]:
    """Running Guaranteed containers that `status` shows on the shared pool."""
    out = set()
    for s in seen:
        if s.running and s.qos == GUARANTEED:
            row = status.row_of(s.id)
            if row is not None and row.kind == "shared":
                out.add(s.id)
    return frozenset(out)


class Checker:
    def __init__(
        self,
        truth: Truth,
        state_dir: str,
        figures: KindFigures,
        settings: Settings,
        online: CPUSet,
    ) -> None:
        self.truth = truth
        self.state_dir = state_dir
        self.figures = figures
        self.settings = settings
        self.online = online
        self.last_status: str = ""
        # Guaranteed containers that `status` last showed on the shared pool.
        self.shared_guaranteed: frozenset[str] = frozenset()

    def record(self, stage: str, problems: list[Problem]) -> None:
        for p in problems:
            self.figures.violation(p.category, p.identity, f"{stage}: {p.message}")

    def look(self, stage: str, deadline: float) -> list[Seen] | None:
        """The runtime's containers and their cgroups; None (and a violation) when containerd
        does not answer before the deadline."""
        while True:
            try:
                seen = self.truth.snapshot()
            except grpc.RpcError as exc:
                if time.monotonic() < deadline:
                    time.sleep(LOOK_PAUSE)
                    continue
                self.figures.violation(
                    OTHER, f"containerd@{stage}", f"{stage}: containerd does not answer: {exc}"
                )
                return None
            if overlaps := guaranteed_overlaps(seen, self.shared_guaranteed):
                # Never right for two containers that hold their CPUs; `status` says whether
                # the enforcer put one of them on the shared pool.
                with contextlib.suppress(StatusError):
                    status = read_status(self.state_dir)
                    self.last_status = status.text
                    self.shared_guaranteed = shared_decided(seen, status)
                    overlaps = guaranteed_overlaps(seen, self.shared_guaranteed)
                self.record(stage, overlaps)
            return seen

    def sample(self, stage: str) -> list[Seen]:
        """One look, counting Guaranteed containers that share a CPU (check 1, at once)."""
        return self.look(stage, time.monotonic() + self.settings.settle_seconds) or []

    def settle(self, stage: str, *, with_status: bool = True) -> None:
        """Checks 1 and 3, waiting up to the settle time for re-pins and repairs."""
        self.figures.checks += 1
        deadline = time.monotonic() + self.settings.settle_seconds
        wrong_first: set[str] | None = None
        problems: list[Problem] = []
        seen: list[Seen] = []
        shared_guaranteed = self.shared_guaranteed
        while True:
            status: Status | None = None
            status_error: Problem | None = None
            if with_status:
                try:
                    status = read_status(self.state_dir)
                    self.last_status = status.text
                except StatusError as exc:
                    status_error = Problem(OTHER, f"status@{stage}", str(exc))
            looked = self.look(stage, deadline)
            if looked is None:
                return
            seen = looked
            if status is not None:
                shared_guaranteed = self.shared_guaranteed = shared_decided(seen, status)
            problems = model_problems(seen, self.online, shared_guaranteed)
            if wrong_first is None:
                wrong_first = {p.container for p in problems if p.container}
            if status is not None:
                problems += status_problems(seen, status)
            elif status_error is not None:
                problems.append(status_error)
            if not problems or time.monotonic() >= deadline:
                break
            time.sleep(LOOK_PAUSE)
        self.record(f"{stage} (after {self.settings.settle_seconds:.0f}s)", problems)
        right = {s.id for s in seen if s.running} - {
            p.container for p in model_problems(seen, self.online, shared_guaranteed) if p.container
        }
        self.figures.repairs += len((wrong_first or set()) & right)

    def probe(self, node: Node, stage: str, *, keep: bool) -> RunningPod | None:
        """Check 2: with no Guaranteed container left, a new Guaranteed pod gets a CPU."""
        problems = node.remove_all(GUARANTEED) + node.catch_up()
        deadline = time.monotonic() + self.settings.settle_seconds
        while True:
            seen = self.look(stage, deadline)
            if seen is None:
                return None
            left = [s for s in seen if s.qos == GUARANTEED]
            if not left:
                break
            if time.monotonic() >= deadline:
                self.figures.violation(
                    OTHER,
                    f"unremovable@{stage}",
                    f"{stage}: Guaranteed containers still in the runtime after kubelet removed "
                    f"their pods: {', '.join(s.label for s in left)}; {'; '.join(problems)}",
                )
                return None
            problems = node.catch_up()
            time.sleep(LOOK_PAUSE)
        deadline = time.monotonic() + self.settings.leak_seconds
        while True:
            outcome = node.start_pod(node.manifest_for(GUARANTEED, "probe-"))
            if outcome.started:
                break
            if time.monotonic() < deadline:
                with contextlib.suppress(grpc.RpcError):
                    node.relist()
                time.sleep(0.5)
                continue
            category = LEAK if outcome.code == grpc.StatusCode.RESOURCE_EXHAUSTED else OTHER
            self.figures.violation(
                category,
                f"probe@{stage}",
                f"{stage}: the runtime has no Guaranteed container, yet a new Guaranteed pod "
                f"could not start for {self.settings.leak_seconds:.0f}s: "
                f"{outcome.code.name if outcome.code else '?'}: {outcome.details}",
            )
            return None
        pod = outcome.pod
        assert pod is not None
        cid = pod.containers.get("app", "")
        mine = [s for s in self.sample(stage) if s.id == cid]
        if mine and mine[0].running and mine[0].cpus is not None and len(mine[0].cpus) != 1:
            self.figures.violation(
                UNREPAIRED,
                cid,
                f"{stage}: the new Guaranteed pod {pod.name} runs on CPUs {mine[0].cpus}, "
                "not on one of its own",
            )
        if not keep:
            node.remove_pod(pod)
        return pod
