"""Prometheus metrics, one registry per app so tests (and the benchmark) can build several."""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest

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


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.requests = Counter(
            "resource_webhook_requests",
            "Admission requests answered, by outcome.",
            ["outcome"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "resource_webhook_request_duration_seconds",
            "Time from the first byte of the request body read to the answer, in seconds.",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.denials = Counter(
            "resource_webhook_denials",
            "Pods refused, by reason.",
            ["reason"],
            registry=self.registry,
        )
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
        # Children made up front: every series shows from the start (at 0), and the hot path
        # skips the label lookup.
        self._outcome = {o: self.requests.labels(o) for o in OUTCOMES}
        self._reason = {r: self.denials.labels(r) for r in DENIAL_REASONS}
        for result in ("success", "failure"):
            self.cert_reloads.labels(result)

    def observe(self, result: Result, seconds: float) -> None:
        self._outcome[result.outcome].inc()
        self.latency.observe(seconds)
        if result.reason is not None:
            child = self._reason.get(result.reason) or self.denials.labels(result.reason)
            child.inc()

    def certificate_reloaded(self, ok: bool) -> None:
        self.cert_reloads.labels("success" if ok else "failure").inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
