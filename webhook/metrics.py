"""Prometheus metrics, one registry per app so tests (and the benchmark) can build several."""

from __future__ import annotations

import math
import time
from bisect import bisect_left
from collections.abc import Iterator

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from webhook.admission import Result
from webhook.build import version

OUTCOMES = ("patched", "unchanged", "ignored", "denied", "invalid", "too_large", "error")
DENIAL_REASONS = (
    "malformed",
    "unknown",
    "forbidden",
    "preference",
    "preference-forbidden",
    "quantity",
    "affinity",
    "internal",
)
# Admission is a sub-millisecond affair; the API server gives up after timeoutSeconds (5).
LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)
CONTENT_TYPE = CONTENT_TYPE_LATEST


class _Admissions(Collector):
    """The admission series, counted in plain numbers and shown as prometheus-client's
    Counter and Histogram show them (the same names, labels, buckets and `_created` series).

    Every pod in the cluster is counted here: a Counter's and a Histogram's locks and method
    calls cost more than the rest of the bookkeeping. Only the event loop counts (a review
    answered on the worker thread is counted once back on the loop)."""

    def __init__(self) -> None:
        now = time.time()
        self.outcomes = dict.fromkeys(OUTCOMES, 0)
        self.reasons = dict.fromkeys(DENIAL_REASONS, 0)
        self.created = {("outcome", o): now for o in OUTCOMES}
        self.created.update({("reason", r): now for r in DENIAL_REASONS})
        self.latency_created = now
        # Per bucket (the last one +Inf), not cumulative; bisect finds the bucket.
        self.buckets = [0] * (len(LATENCY_BUCKETS) + 1)
        self.latency_sum = 0.0

    def observe(self, result: Result, seconds: float) -> None:
        self.outcomes[result.outcome] += 1
        self.buckets[bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.latency_sum += seconds
        reason = result.reason
        if reason is not None:
            if reason not in self.reasons:  # a reason of a newer rule: its own series
                self.reasons[reason] = 0
                self.created["reason", reason] = time.time()
            self.reasons[reason] += 1

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "resource_webhook_requests",
            "Admission requests answered, by outcome.",
            labels=["outcome"],
        )
        for outcome, count in list(self.outcomes.items()):
            requests.add_metric([outcome], count, created=self.created["outcome", outcome])
        yield requests
        latency = HistogramMetricFamily(
            "resource_webhook_request_duration_seconds",
            "Time from the first byte of the request body read to the answer, in seconds.",
        )
        cumulative, running = [], 0
        for bound, count in zip((*LATENCY_BUCKETS, math.inf), self.buckets, strict=True):
            running += count
            cumulative.append((floatToGoString(bound), running))
        latency.add_metric([], cumulative, self.latency_sum)
        latency.add_sample(
            "resource_webhook_request_duration_seconds_created", {}, self.latency_created
        )
        yield latency
        denials = CounterMetricFamily(
            "resource_webhook_denials", "Pods refused, by reason.", labels=["reason"]
        )
        for reason, count in list(self.reasons.items()):
            denials.add_metric([reason], count, created=self.created["reason", reason])
        yield denials


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._admissions = _Admissions()
        self.registry.register(self._admissions)
        self.cert_reloads = Counter(
            "resource_webhook_certificate_reloads",
            "Serving certificate reloads after the files changed on disk, by result.",
            ["result"],
            registry=self.registry,
        )
        self.build_info = Gauge(
            "resource_webhook_build_info",
            "The running build: always 1, its version as a label.",
            ["version"],
            registry=self.registry,
        )
        self.build_info.labels(version()).set(1)
        for result in ("success", "failure"):
            self.cert_reloads.labels(result)  # every series shows from the start (at 0)
        self.observe = self._admissions.observe  # (result, seconds): one admission answered

    def certificate_reloaded(self, ok: bool) -> None:
        self.cert_reloads.labels("success" if ok else "failure").inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
