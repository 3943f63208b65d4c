"""Attacks: peers that hold the webhook's connections and never finish a request.

Slow loris: 200 TLS connections send half a request header and stall. The webhook must cut
them off within 30 s and keep answering a normal client's reviews within 1 s meanwhile.
Connection flood: 600 TCP connections that never start a TLS handshake. The webhook must keep
its memory bounded, close them, and answer again once they are gone.
"""

from __future__ import annotations

import socket
import ssl
import time
from pathlib import Path

import httpx
from hostile_support import peak_rss_mib, rss_mib, small_review, stalled_tls, wait_all_closed

from tests.webhook.wh_support import WebhookServer

HEADERS = {"Content-Type": "application/json"}
HALF_HEADER = b"POST /mutate HTTP/1.1\r\nHost: resource-webhook\r\nContent-Type: appl"


def test_slow_loris_connections_are_cut_off_and_reviews_still_answered(
    webhook: WebhookServer, certs: Path, measured
) -> None:
    ctx = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    started = time.monotonic()
    stalled = [stalled_tls(webhook.port, ctx, HALF_HEADER) for _ in range(200)]
    latencies = []
    with httpx.Client(base_url=webhook.url, verify=ctx, timeout=10) as client:
        # A normal client all the while the stalled connections are held open.
        for i in range(40):
            t = time.perf_counter()
            r = client.post("/mutate", content=small_review(i), headers=HEADERS)
            latencies.append(time.perf_counter() - t)
            assert r.status_code == 200 and r.json()["response"]["allowed"]
            time.sleep(0.1)
    closed_after = wait_all_closed(stalled, timeout=30 - (time.monotonic() - started))
    if closed_after is not None:
        closed_after = time.monotonic() - started  # from the first stalled connection
    for s in stalled:
        s.close()
    slowest = max(latencies)
    measured(
        "200 slow-loris TLS connections (half a header, then silence)",
        "all closed < 30 s; reviews meanwhile answered < 1 s",
        "all closed "
        + (f"after {closed_after:.1f} s" if closed_after is not None else "NOT after 30 s")
        + f"; slowest review {slowest * 1000:.0f} ms",
    )
    assert closed_after is not None, "stalled connections still open 30 s after they stalled"
    assert slowest < 1.0


def test_a_flood_of_idle_connections_is_bounded_and_cleared(
    webhook: WebhookServer, certs: Path, measured
) -> None:
    ctx = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    pid = webhook.process.pid
    before = rss_mib(pid)
    started = time.monotonic()
    flood = []
    for _ in range(600):
        s = socket.create_connection(("127.0.0.1", webhook.port), timeout=10)
        flood.append(s)
    time.sleep(1)
    during = rss_mib(pid)
    closed_after = wait_all_closed(flood, timeout=30)
    for s in flood:
        s.close()
    # Once they are gone, reviews are answered again (the gate may count the last of them for
    # a moment longer than the server holds them).
    closed_at = time.monotonic()
    while True:
        try:
            r = httpx.post(
                f"{webhook.url}/mutate", content=small_review(0), headers=HEADERS, verify=ctx
            )
            break
        except httpx.TransportError:
            assert time.monotonic() - closed_at < 5, "not answering after the flood ended"
            time.sleep(0.2)
    assert r.status_code == 200 and r.json()["response"]["allowed"]
    recovered = time.monotonic() - closed_at
    growth = max(during, peak_rss_mib(pid)) - before
    measured(
        "600 TCP connections that never start TLS",
        "RSS growth < 40 MiB; all closed < 30 s; answering again < 5 s later",
        f"RSS +{growth:.0f} MiB; all closed "
        + (f"after {closed_after:.1f} s" if closed_after is not None else "NOT after 30 s")
        + f"; answering {recovered:.1f} s later",
    )
    assert growth < 40, f"RSS grew by {growth:.0f} MiB"
    assert closed_after is not None and time.monotonic() - started < 40
