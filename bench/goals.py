"""Issue 16's goals against the figures of one `make bench` run, each met or not.

`python -m bench` (all benchmarks) ends with this table; `python -m bench goals` prints it from
the results the last runs left in bench/results/. A figure comes from a results file written
since `since` (the start of the run), else it is "not measured in this run": a table mixing
runs would not say what one run gives.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"

# The relay's cases with the Go client, one call at a time, kubelet's deadline.
RELAY_CASES = ("Version", "ListContainers", "ContainerStatus")
CREATE = "CreateContainer (state written, fsync)"


@dataclass(frozen=True)
class Goal:
    name: str
    figure: str  # what was measured, with its unit or ratio
    met: bool | None  # None: not measured in this run


def _load(name: str, since: float) -> dict[str, Any] | None:
    path = RESULTS / name
    if not path.exists() or path.stat().st_mtime < since:
        return None
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def _missing(name: str) -> Goal:
    return Goal(name, "not measured in this run", None)


def webhook_goals(report: dict[str, Any] | None) -> list[Goal]:
    throughput = "webhook throughput >= 1.0 x Go, one core, a distinct pod a request"
    latency = "webhook p99 <= 10 ms at 200 reviews/s"
    summary = {} if report is None or report.get("same_pod") else report["summary"]
    goals = []
    ratio = summary.get("go_throughput_ratio")
    if ratio is None:  # no Go, or no run
        goals.append(_missing(throughput))
    else:
        cpu = " / ".join(str(summary[s]["cpu_us_per_request"]) for s in ("webhook", "go", "bare"))
        goals.append(
            Goal(
                throughput,
                f"{ratio} x (CPU per review, ours / Go / bare app: {cpu} us)",
                ratio >= 1,
            )
        )
    p99 = summary.get("webhook", {}).get("p99_ms_at_200_rps")
    # Another --rate writes its own key: only the 200 reviews/s counts.
    goals.append(_missing(latency) if p99 is None else Goal(latency, f"{p99} ms", p99 <= 10))
    return goals


def relay_goals(report: dict[str, Any] | None, creates: dict[str, Any] | None = None) -> list[Goal]:
    """From `python -m bench relay`'s results, and `--create-only`'s (`creates`) for the
    CreateContainer figure when the whole run did not measure it."""
    passthrough = "relay p50 <= 1.6 x direct, Go client, 1 at a time"
    proxy = "relay p50 below the grpc-go proxy's"
    create = "CreateContainer added p99 <= 3 ms, durable state"
    goals = []
    rows = [(report or {}).get("go_client", {}).get(f"{c} x1 deadline 2m") for c in RELAY_CASES]
    if not all(rows):
        goals += [_missing(passthrough), _missing(proxy)]
    else:
        ratios = [row["relay_p50_ratio"] for row in rows]
        floor = [
            f"{side} {' / '.join(str(row.get(f'{side}_p50_ratio')) for row in rows)}"
            for side in ("Go byte pipe", "Python byte pipe")
            if f"{side}_p50_ratio" in rows[0]
        ]
        goals.append(
            Goal(
                passthrough,
                " / ".join(map(str, ratios))
                + f" x ({' / '.join(RELAY_CASES)})"
                + (f"; the floor, pipes that parse nothing: {'; '.join(floor)}" if floor else ""),
                max(ratios) <= 1.6,
            )
        )
        proxies = [row["grpc-go proxy_p50_ratio"] for row in rows]
        goals.append(
            Goal(
                proxy,
                f"relay {' / '.join(map(str, ratios))}, proxy {' / '.join(map(str, proxies))}",
                all(r < p for r, p in zip(ratios, proxies, strict=True)),
            )
        )
    row = next(
        (
            r["python_client"][CREATE]
            for r in (report, creates)
            if r and CREATE in r["python_client"]
        ),
        None,
    )
    if row is None:
        goals.append(_missing(create))
    else:
        added = row["p99_added_ms"]
        goals.append(Goal(create, f"+{added} ms (p50 +{row['p50_added_ms']} ms)", added <= 3))
    return goals


def policy_goals(report: dict[str, Any] | None) -> list[Goal]:
    decision = "policy p99 <= 1 ms, 2,000 containers on 768 CPUs"
    plan = "plan over 2,000 pods on 768 CPUs well under a minute (< 30 s)"
    machine = None if report is None else report["machines"].get("synthetic-768")
    if machine is None:
        return [_missing(decision), _missing(plan)]
    p99 = {name: p["decision_p99_ms"] for name, p in machine["policies"].items()}
    goals = [
        Goal(
            decision,
            " / ".join(f"{name} {ms} ms" for name, ms in p99.items()),
            max(p99.values()) <= 1,
        )
    ]
    if "plan" not in machine:
        goals.append(_missing(plan))
    else:
        seconds = machine["plan"]["seconds"]
        goals.append(Goal(plan, f"{seconds} s", seconds < 30))
    return goals


def goals(since: float = 0.0) -> list[Goal]:
    return [
        *webhook_goals(_load("webhook.json", since)),
        *relay_goals(_load("relay.json", since), _load("relay-create.json", since)),
        *policy_goals(_load("policy.json", since)),
    ]


def render(found: Sequence[Goal]) -> list[str]:
    verdict = {True: "met", False: "NOT MET", None: "-"}
    width = max(len(g.name) for g in found)
    lines = ["issue 16's goals, this run:"]
    lines += [f"  {verdict[g.met]:8s} {g.name:{width}s}  {g.figure}" for g in found]
    measured = [g.met for g in found if g.met is not None]
    lines.append(
        f"  {sum(measured)} of {len(measured)} measured goals met"
        + (f"; {len(found) - len(measured)} not measured" if len(measured) < len(found) else "")
    )
    return lines


def main(argv: Sequence[str] = ()) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench goals", description=__doc__)
    parser.add_argument(
        "--since", type=float, default=0.0, help="only results written after this Unix time"
    )
    args = parser.parse_args(argv)
    print("\n".join(render(goals(args.since))))
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
