"""The admission metrics, counted in plain numbers, read as prometheus-client's own Counter and
Histogram would show the same observations."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.exposition import generate_latest

from webhook.admission import Result
from webhook.metrics import DENIAL_REASONS, LATENCY_BUCKETS, OUTCOMES, Metrics


def reference(observations: list[tuple[str, str | None, float]]) -> bytes:
    """What prometheus-client's metrics expose for the same observations."""
    registry = CollectorRegistry()
    requests = Counter(
        "resource_webhook_requests",
        "Admission requests answered, by outcome.",
        ["outcome"],
        registry=registry,
    )
    latency = Histogram(
        "resource_webhook_request_duration_seconds",
        "Time from the first byte of the request body read to the answer, in seconds.",
        buckets=LATENCY_BUCKETS,
        registry=registry,
    )
    denials = Counter(
        "resource_webhook_denials", "Pods refused, by reason.", ["reason"], registry=registry
    )
    for o in OUTCOMES:
        requests.labels(o)
    for r in DENIAL_REASONS:
        denials.labels(r)
    for outcome, reason, seconds in observations:
        requests.labels(outcome).inc()
        latency.observe(seconds)
        if reason is not None:
            denials.labels(reason).inc()
    return generate_latest(registry)


def _admission_part(text: bytes) -> str:
    """The admission series, creation times blanked (each side has its own)."""
    lines = [
        line
        for line in text.decode().splitlines()
        if "certificate_reloads" not in line and "build_info" not in line
    ]
    return re.sub(r"(_created(\{[^}]*\})?) \S+", r"\1 T", "\n".join(lines))


observations = st.lists(
    st.tuples(
        st.sampled_from(OUTCOMES),
        st.none() | st.sampled_from([*DENIAL_REASONS, "a-newer-reason"]),
        st.sampled_from(LATENCY_BUCKETS) | st.floats(0, 10),
    ),
    max_size=30,
)


@settings(max_examples=100, deadline=None)
@given(observations)
def test_the_admission_series_read_as_prometheus_clients_own(
    seen: list[tuple[str, str | None, float]],
) -> None:
    metrics = Metrics()
    for outcome, reason, seconds in seen:
        metrics.observe(Result(200, b"", outcome, reason=reason), seconds)
    assert _admission_part(metrics.exposition()) == _admission_part(reference(seen))


def test_the_other_series_are_still_there() -> None:
    metrics = Metrics()
    metrics.certificate_reloaded(False)
    text = metrics.exposition().decode()
    assert 'resource_webhook_certificate_reloads_total{result="failure"} 1.0' in text
    assert 'resource_webhook_build_info{version="' in text
