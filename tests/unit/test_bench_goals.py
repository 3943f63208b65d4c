"""`bench.goals`: each of issue 16's goals judged from one run's results files, never a mix."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from bench import goals

# The keys the benchmarks write (bench/webhook.py's summary, bench/relay.py's rows, policy.json).
WEBHOOK = {
    "same_pod": False,
    "summary": {
        "webhook": {"cpu_us_per_request": 114.9, "p99_ms_at_200_rps": 1.85},
        "go": {"cpu_us_per_request": 103.7},
        "bare": {"cpu_us_per_request": 70.1},
        "go_throughput_ratio": 0.905,
    },
}


def relay(ratios: tuple[float, float, float], create_p99: float) -> dict[str, Any]:
    rows = {
        f"{case} x1 deadline 2m": {
            "relay_p50_ratio": r,
            "grpc-go proxy_p50_ratio": 3.0,
            "Go byte pipe_p50_ratio": 1.7,
            "Python byte pipe_p50_ratio": 1.5,
        }
        for case, r in zip(goals.RELAY_CASES, ratios, strict=True)
    }
    create = {"p50_added_ms": 1.1, "p99_added_ms": create_p99}
    return {"go_client": rows, "python_client": {goals.CREATE: create}}


POLICY = {
    "machines": {
        "synthetic-768": {
            "policies": {
                "static": {"decision_p99_ms": 0.62},
                "topology-aware": {"decision_p99_ms": 0.57},
            },
            "plan": {"pods": 2000, "seconds": 4.2},
        }
    }
}


@pytest.fixture
def results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(goals, "RESULTS", tmp_path)
    return tmp_path


def _write(folder: Path, name: str, data: dict[str, Any], mtime: float | None = None) -> None:
    path = folder / name
    path.write_text(json.dumps(data))
    if mtime is not None:
        os.utime(path, (mtime, mtime))


def _verdicts(found: list[goals.Goal]) -> dict[str, bool | None]:
    return {g.name: g.met for g in found}


def test_each_goal_is_judged_from_its_figure(results: Path) -> None:
    _write(results, "webhook.json", WEBHOOK)
    _write(results, "relay.json", relay((1.5, 1.6, 2.16), create_p99=2.05))
    _write(results, "policy.json", POLICY)
    found = goals.goals()
    assert [g.met for g in found] == [False, True, False, True, True, True, True]
    relay_row = found[2]
    assert relay_row.figure.startswith("1.5 / 1.6 / 2.16 x")  # the worst case decides
    assert "Go byte pipe 1.7 / 1.7 / 1.7" in relay_row.figure
    assert found[4].figure == "+2.05 ms (p50 +1.1 ms)"


def test_a_case_over_the_goal_or_the_proxy_fails_it(results: Path) -> None:
    _write(results, "relay.json", relay((1.5, 1.61, 3.5), create_p99=3.01))
    verdicts = _verdicts(goals.relay_goals(json.loads((results / "relay.json").read_text())))
    assert list(verdicts.values()) == [False, False, False]


def test_results_older_than_the_run_are_not_measured(results: Path) -> None:
    _write(results, "webhook.json", WEBHOOK, mtime=1000.0)
    _write(results, "policy.json", POLICY)
    found = goals.goals(since=2000.0)
    webhook = [g for g in found if g.name.startswith("webhook")]
    assert [g.met for g in webhook] == [None, None]
    assert all(g.figure == "not measured in this run" for g in webhook)
    lines = goals.render(found)
    assert lines[-1] == "  2 of 2 measured goals met; 5 not measured"


def test_a_same_pod_run_does_not_count_for_the_webhook(results: Path) -> None:
    _write(results, "webhook.json", {**WEBHOOK, "same_pod": True})
    assert [g.met for g in goals.webhook_goals(goals._load("webhook.json", 0))] == [None, None]


def test_a_run_at_another_rate_or_without_go_is_not_measured(results: Path) -> None:
    summary = {k: v for k, v in WEBHOOK["summary"].items() if k != "go_throughput_ratio"}
    summary["webhook"] = {"cpu_us_per_request": 114.9, "p99_ms_at_100_rps": 1.2}
    _write(results, "webhook.json", {"same_pod": False, "summary": summary})
    assert [g.met for g in goals.webhook_goals(goals._load("webhook.json", 0))] == [None, None]


def test_creates_measured_alone_count_for_the_create_goal(results: Path) -> None:
    _write(results, "relay-create.json", relay((1.0, 1.0, 1.0), create_p99=2.5))
    _write(results, "relay.json", {"go_client": {}, "python_client": {}})
    verdicts = [g.met for g in goals.goals() if g.name.startswith(("relay", "CreateContainer"))]
    assert verdicts == [None, None, True]
