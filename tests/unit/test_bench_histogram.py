"""bench/histogram.py: the API server's admission histogram read from the metrics text, the
difference of two scrapes, and quantiles as Prometheus' histogram_quantile estimates them."""

from __future__ import annotations

import math

from bench.histogram import EMPTY, histogram

NAME = "apiserver_admission_webhook_admission_duration_seconds"


def scrape(create: list[int], update: list[int], other: list[int]) -> str:
    bounds = ["0.005", "0.025", "0.1", "+Inf"]
    lines = [f"# HELP {NAME} Admission webhook latency", f"# TYPE {NAME} histogram"]
    for op, name, counts in (
        ("CREATE", "resources.resource-enforcer.dev", create),
        ("UPDATE", "resources.resource-enforcer.dev", update),
        ("CREATE", "other.example.com", other),
    ):
        labels = f'name="{name}",operation="{op}",rejected="false",type="admit"'
        for le, n in zip(bounds, counts, strict=True):
            lines.append(f'{NAME}_bucket{{{labels},le="{le}"}} {n}')
        lines.append(f"{NAME}_sum{{{labels}}} {0.01 * counts[-1]}")
        lines.append(f"{NAME}_count{{{labels}}} {counts[-1]}")
    lines.append(f'{NAME}_other_bucket{{name="x",le="1"}} 99')
    return "\n".join(lines) + "\n"


MATCH = {"name": "resources.resource-enforcer.dev", "type": "admit", "operation": "CREATE"}


def test_only_the_matching_series_is_read() -> None:
    h = histogram(scrape([10, 90, 100, 100], [1, 1, 1, 1], [0, 0, 0, 50]), NAME, MATCH)
    assert h.buckets == ((0.005, 10.0), (0.025, 90.0), (0.1, 100.0), (math.inf, 100.0))
    assert h.count == 100 and math.isclose(h.mean, 0.01)


def test_quantiles_interpolate_within_the_bucket() -> None:
    h = histogram(scrape([10, 90, 100, 100], [0] * 4, [0] * 4), NAME, MATCH)
    # rank 50 of 100: 40 of the 80 in (0.005, 0.025]
    assert math.isclose(h.quantile(0.5), 0.005 + 0.02 * 40 / 80)
    # rank 99: 9 of the 10 in (0.025, 0.1]
    assert math.isclose(h.quantile(0.99), 0.025 + 0.075 * 9 / 10)


def test_the_difference_of_two_scrapes_counts_only_what_happened_between() -> None:
    before = histogram(scrape([10, 10, 10, 10], [0] * 4, [0] * 4), NAME, MATCH)
    after = histogram(scrape([10, 20, 30, 40], [0] * 4, [0] * 4), NAME, MATCH)
    d = after.minus(before)
    assert d.count == 30
    assert d.buckets == ((0.005, 0.0), (0.025, 10.0), (0.1, 20.0), (math.inf, 30.0))
    # rank 29.7 falls into +Inf: the highest finite bound, as histogram_quantile answers.
    assert d.quantile(0.99) == 0.1


def test_no_series_and_no_observations() -> None:
    assert histogram("", NAME, MATCH) is EMPTY
    assert math.isnan(EMPTY.quantile(0.5)) and math.isnan(EMPTY.mean)


def test_two_rounds_added_count_both() -> None:
    one = histogram(scrape([10, 20, 30, 40], [0] * 4, [0] * 4), NAME, MATCH)
    two = histogram(scrape([0, 0, 5, 10], [0] * 4, [0] * 4), NAME, MATCH)
    both = one.plus(two)
    assert both.count == 50 and math.isclose(both.total, 0.5)
    assert both.buckets == ((0.005, 10.0), (0.025, 20.0), (0.1, 35.0), (math.inf, 50.0))
    assert EMPTY.plus(one) == one
