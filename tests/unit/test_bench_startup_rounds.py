"""bench/startup.py's interleaving: every mode gets its share of the pods in every round, the
order of the modes rotates from one round to the next, and a mode's rounds merge into one run."""

from __future__ import annotations

from bench.histogram import Histogram
from bench.startup import merged, order, shares


def test_the_pods_are_shared_out_over_the_rounds() -> None:
    assert shares(100, 3) == [34, 33, 33]
    assert shares(4, 2) == [2, 2]
    assert shares(1, 2) == [1, 0]
    assert sum(shares(101, 4)) == 101


def test_each_mode_goes_first_in_turn() -> None:
    modes = ["none", "relay", "nri"]
    rounds = [order(modes, r) for r in range(3)]
    assert rounds == [
        ["none", "relay", "nri"],
        ["relay", "nri", "none"],
        ["nri", "none", "relay"],
    ]
    assert [r[0] for r in rounds] == modes


def test_a_modes_rounds_merge_into_one_run() -> None:
    def part(ready: list[float], hook: Histogram, seconds: float) -> dict[str, object]:
        return {
            "one_at_a_time": {"ready": ready, "applied": ready, "scheduled": ready},
            "burst": {"ready": [9.0], "applied": [1.0]},
            "webhook": hook,
            "seconds": seconds,
        }

    h1 = Histogram(((0.1, 1.0), (float("inf"), 2.0)), 0.3, 2.0)
    h2 = Histogram(((0.1, 3.0), (float("inf"), 3.0)), 0.2, 3.0)
    run = merged([part([1.0, 2.0], h1, 60.0), part([3.0], h2, 50.0)])
    assert run["one_at_a_time"]["ready"] == [1.0, 2.0, 3.0]
    assert run["burst"]["ready"] == [9.0, 9.0]
    assert run["webhook"]["count"] == 5.0 and run["webhook"]["buckets"] == (
        (0.1, 4.0),
        (float("inf"), 5.0),
    )
    assert (run["seconds"], run["rounds"]) == (110.0, 2)
