"""Attack: a flood of distinct, maximal AdmissionReviews against the webhook's memory.

Every review is a pod with thousands of containers, just under the 3 MiB body limit, and no two
are alike, so each one is computed and offered to the cache. The webhook must answer them all
and keep its peak RSS well under the Deployment's memory limit: with `failurePolicy: Fail` an
OOM-killed webhook refuses every pod in the cluster.
"""

from __future__ import annotations

import ssl
import threading
import time
from pathlib import Path

import httpx
from hostile_support import (
    MiB,
    deployment_memory_limit_mib,
    large_review,
    peak_rss_mib,
    rss_mib,
    small_review,
)

from tests.webhook.wh_support import WebhookServer

REPO = Path(__file__).resolve().parents[2]
REVIEWS = 100
CONTAINERS = 3000
PAD = 680  # bytes of environment per container: the body just under 3 MiB
HEADERS = {"Content-Type": "application/json"}


def test_distinct_3mib_reviews_keep_the_webhook_under_its_memory_limit(
    webhook: WebhookServer, certs: Path, measured
) -> None:
    limit = deployment_memory_limit_mib(str(REPO / "deploy/webhook/deployment.yaml"))
    bound = 0.75 * limit  # room to spare under the limit
    ctx = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    start = rss_mib(webhook.process.pid)
    small_latency: list[float] = []
    done = threading.Event()

    def small_reviews() -> None:
        # A normal client meanwhile: its small reviews are answered off the large ones' path.
        with httpx.Client(base_url=webhook.url, verify=ctx, timeout=30) as client:
            i = 0
            while not done.is_set() and i < 10_000:
                t = time.perf_counter()
                r = client.post("/mutate", content=small_review(i), headers=HEADERS)
                small_latency.append(time.perf_counter() - t)
                assert r.status_code == 200 and r.json()["response"]["allowed"]
                i += 1
                time.sleep(0.05)

    side = threading.Thread(target=small_reviews, daemon=True)
    side.start()
    sizes = []
    try:
        with httpx.Client(base_url=webhook.url, verify=ctx, timeout=60) as client:
            for seed in range(REVIEWS):
                body = large_review(seed, CONTAINERS, PAD)
                sizes.append(len(body))
                r = client.post("/mutate", content=body, headers=HEADERS)
                assert r.status_code == 200, r.text[:300]
                answer = r.json()["response"]
                assert answer["allowed"] and answer["uid"] == f"wide-{seed}" and answer["patch"]
    finally:
        done.set()
        side.join(60)
    peak = peak_rss_mib(webhook.process.pid)
    assert min(sizes) > 2.5 * MiB and max(sizes) < 3 * MiB
    measured(
        f"{REVIEWS} distinct {max(sizes) / MiB:.1f} MiB reviews ({CONTAINERS} containers each)",
        f"peak RSS < {bound:.0f} MiB (limit {limit:.0f}Mi)",
        f"peak RSS {peak:.0f} MiB (at start {start:.0f} MiB)",
    )
    assert peak < bound, f"peak RSS {peak:.0f} MiB, over {bound:.0f} MiB"
    assert small_latency, "the normal client got no answer"
    slowest = max(small_latency)
    measured(
        "small reviews while the large ones are answered",
        "each answered < 1 s",
        f"{len(small_latency)} answered, slowest {slowest * 1000:.0f} ms",
    )
    assert slowest < 1.0
