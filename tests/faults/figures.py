"""The fault suite's figures: per kind, what was tried, what was injected, what was found.

One `KindFigures` per fault test; `RUN` collects them for the summary printed at the end of
the pytest run (tests/faults/conftest.py) and, with FAULTS_REPORT, a Markdown table.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from dataclasses import dataclass, field

from tests.faults.settings import SETTINGS

# The violation categories, in the order the table shows them.
DOUBLE = "double"  # a CPU of a running Guaranteed container also in another running one's cpuset
LEAK = "leak"  # no Guaranteed container in the runtime, yet a new one cannot get a CPU
UNREPAIRED = "unrepaired"  # a running container's cgroup not what it should be after the settle
UNTRACKED = "untracked"  # a running container that `resource-enforcer status` does not list
OTHER = "other"  # the CRI endpoint lost, an unclear refusal, pods that cannot be removed
CATEGORIES = (DOUBLE, LEAK, UNREPAIRED, UNTRACKED, OTHER)
MAX_MESSAGES = 12


@dataclass
class KindFigures:
    kind: str
    planned: int
    faults: Counter[str] = field(default_factory=Counter)  # injected, by variant
    tries: int = 0  # pods the emulated kubelet tried to start
    refused: int = 0  # of which the enforcer refused (RESOURCE_EXHAUSTED and the like)
    checks: int = 0  # settled checks of the whole node
    repairs: int = 0  # running containers whose cgroup was wrong, then right, same container
    # Tasks containerd left behind a StartContainer cut off while they were made, deleted by
    # hand so the pod could go (containerd#11037: a containerd bug, not a violation).
    stuck_tasks: int = 0
    violations: Counter[str] = field(default_factory=Counter)
    messages: list[str] = field(default_factory=list)
    stopped_early: bool = False
    started: float = field(default_factory=time.monotonic)
    seconds: float = 0.0
    _seen: set[tuple[str, str]] = field(default_factory=set)

    @property
    def injected(self) -> int:
        return sum(self.faults.values())

    @property
    def total_violations(self) -> int:
        return sum(self.violations.values())

    def fault(self, variant: str) -> None:
        self.faults[variant] += 1

    def violation(self, category: str, identity: str, message: str) -> bool:
        """Counts a violation once per (category, identity) in this kind; True when new."""
        assert category in CATEGORIES, category
        if (category, identity) in self._seen:
            return False
        self._seen.add((category, identity))
        self.violations[category] += 1
        if len(self.messages) < MAX_MESSAGES:
            self.messages.append(f"[{category}] {message}")
        announce(f"{self.kind}: [{category}] {message}")
        return True

    def finish(self) -> None:
        self.seconds = time.monotonic() - self.started

    def variants(self) -> str:
        return ", ".join(f"{name} {n}" for name, n in sorted(self.faults.items()))

    def report(self) -> str:
        """What a failed test prints: the figures and the first messages."""
        counts = ", ".join(f"{c} {self.violations[c]}" for c in CATEGORIES)
        lines = [
            f"{self.kind}: {self.injected} faults injected ({self.variants()}), "
            f"{self.tries} pods tried, {self.checks} checks; violations: {counts}; "
            f"repairs observed {self.repairs}; stuck containerd tasks deleted "
            f"{self.stuck_tasks}; seed {RUN.seed} (FAULTS_SEED={RUN.seed} replays the random "
            "choices)",
        ]
        if self.stopped_early:
            lines.append(
                f"stopped early after {self.total_violations} violations "
                f"({self.injected} of {self.planned} faults injected)"
            )
        lines.extend(self.messages)
        return "\n".join(lines)


@dataclass
class RunFigures:
    seed: int = 0
    kinds: dict[str, KindFigures] = field(default_factory=dict)

    def kind(self, kind: str, planned: int) -> KindFigures:
        figures = KindFigures(kind, planned)
        self.kinds[kind] = figures
        return figures

    def rows(self) -> list[list[str]]:
        header = [
            "kind",
            "faults",
            "tries",
            "refused",
            "checks",
            "double",
            "leaks",
            "unrepaired",
            "untracked",
            "other",
            "repairs",
            "seconds",
        ]
        rows = [header]
        total = KindFigures("total", 0)
        for f in self.kinds.values():
            rows.append(_row(f, f.kind + (" (stopped early)" if f.stopped_early else "")))
            total.faults.update(f.faults)
            total.tries += f.tries
            total.refused += f.refused
            total.checks += f.checks
            total.repairs += f.repairs
            total.violations.update(f.violations)
            total.seconds += f.seconds
        rows.append(_row(total, "total"))
        return rows

    def text_table(self) -> list[str]:
        rows = self.rows()
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        return [
            "  ".join(
                cell.rjust(w) if i else cell.ljust(w)
                for i, (cell, w) in enumerate(zip(r, widths, strict=True))
            )
            for r in rows
        ]

    def stuck_tasks(self) -> str | None:
        """The line on containerd#11037's stuck tasks, when there were any."""
        stuck = [f"{f.kind} {f.stuck_tasks}" for f in self.kinds.values() if f.stuck_tasks]
        if not stuck:
            return None
        return (
            "containerd tasks left behind a StartContainer cut off while they were made "
            f"(containerd#11037), deleted with `ctr task rm -f`: {', '.join(stuck)}"
        )

    def markdown_table(self) -> str:
        rows = self.rows()
        out = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
        out.extend("| " + " | ".join(r) + " |" for r in rows[1:])
        out.append("")
        out.append(f"Seed {self.seed}. Faults by variant:")
        out.append("")
        out.extend(f"- {f.kind}: {f.variants()}" for f in self.kinds.values())
        if (stuck := self.stuck_tasks()) is not None:
            out.extend(["", stuck])
        return "\n".join(out) + "\n"


def announce(line: str) -> None:
    """Prints a violation or a failure the moment it is found, past pytest's capture: a run
    stopped before its summary (a CI timeout, a SIGINT) still shows what failed, and the seed."""
    print(f"\n[fault suite, seed {RUN.seed}] {line}", file=sys.__stderr__, flush=True)


def _row(f: KindFigures, name: str) -> list[str]:
    return [
        name,
        str(f.injected),
        str(f.tries),
        str(f.refused),
        str(f.checks),
        str(f.violations[DOUBLE]),
        str(f.violations[LEAK]),
        str(f.violations[UNREPAIRED]),
        str(f.violations[UNTRACKED]),
        str(f.violations[OTHER]),
        str(f.repairs),
        f"{f.seconds:.0f}",
    ]


RUN = RunFigures(seed=SETTINGS.seed)
