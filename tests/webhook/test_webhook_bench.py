"""The benchmark's parts (not its figures): wrk parsing, the bare app, the Python client."""

from __future__ import annotations

import asyncio
import json
import ssl
import sys
from pathlib import Path

import pytest
from wh_support import WebhookServer

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: bench/

from bench import BENCHMARKS
from bench.webhook import Report, _summarize
from bench.webhook_clients import Run, closed_loop, open_loop, parse_wrk, request_bytes
from bench.webhook_review import sample_review
from bench.webhook_servers import bare_app
from webhook.admission import review
from webhook.mutation import Mutator

WRK_OUTPUT = """Running 5s test @ https://127.0.0.1:8443/mutate
  1 threads and 16 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     2.30ms  812.50us  20.11ms   91.20%
    Req/Sec     7.01k   400.12     7.50k    80.00%
  Latency Distribution
     50%    2.17ms
     75%    2.40ms
     90%    2.90ms
     99%  950.00us
  35100 requests in 5.01s, 31.62MB read
  Non-2xx or 3xx responses: 3
Requests/sec:   7006.12
Transfer/sec:      6.31MB
"""


def test_wrk_output_is_read() -> None:
    got = parse_wrk(WRK_OUTPUT)
    assert got == {
        "requests": 35100,
        "seconds": 5.01,
        "rps": 7006.12,
        "p50_ms": 2.17,
        "p99_ms": 0.95,
        "errors": 3,
    }


def test_registry_names_the_webhook_benchmark() -> None:
    assert BENCHMARKS["webhook"][0] == "bench.webhook"


def test_bare_app_answers_what_the_webhook_answers() -> None:
    body = json.dumps(sample_review()).encode()
    answer = review(body, Mutator()).body
    assert json.loads(answer)["response"]["patchType"] == "JSONPatch"
    sent: list[dict] = []
    messages = [{"type": "http.request", "body": body[:10], "more_body": True},
                {"type": "http.request", "body": body[10:], "more_body": False}]  # fmt: skip

    async def receive() -> dict:
        return messages.pop(0)

    async def send(message: dict) -> None:
        sent.append(message)

    asyncio.run(bare_app(answer)({"type": "http"}, receive, send))
    assert sent[0]["status"] == 200 and sent[1]["body"] == answer and not messages


def test_summary_pairs_rounds() -> None:
    report = Report("cmd", "wrk", 16, 2, 1.0, 200, False)
    for rps_w, rps_b in ((800, 1000), (900, 1000)):
        report.closed_loop.append(Run("webhook", "wrk", 1, 1, rps_w, 1, 2, cpu_us_per_request=125))
        report.closed_loop.append(Run("bare", "wrk", 1, 1, rps_b, 1, 2, cpu_us_per_request=100))
    summary = _summarize(report)
    assert summary["throughput_ratio"] == 0.85 and summary["cpu_ratio"] == 0.8


@pytest.mark.tls
def test_python_client_closed_andopen_loop(
    plain_server: WebhookServer, tls_context: ssl.SSLContext
) -> None:
    raw = request_bytes(json.dumps(sample_review()).encode())
    latencies, errors, _ = asyncio.run(closed_loop(plain_server.port, tls_context, raw, 2, 0.3))
    assert latencies and errors == 0
    latencies, errors, _ = asyncio.run(open_loop(plain_server.port, tls_context, raw, 50, 0.3, 2))
    assert len(latencies) == 15 and errors == 0


def test_every_request_of_the_distinct_mode_is_a_new_pod() -> None:
    """The figure with a distinct pod in every request is not made by the cache."""
    from bench.webhook_review import distinct_body, distinct_template

    template = distinct_template()
    mutator = Mutator()
    patches = set()
    for n in range(1, 6):
        result = review(distinct_body(template, n), mutator)
        response = json.loads(result.body)["response"]
        assert result.status == 200 and response["uid"].startswith(f"{n:08x}-")
        patches.add(response["patch"])
    assert len(patches) == 5  # five annotations computed, none answered from memory
