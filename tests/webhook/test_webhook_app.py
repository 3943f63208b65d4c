"""The HTTP shell in-process (ASGI, no sockets): routes, size limits, metrics, logs, no 500s."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wh_support import CONFIG_YAML, body, container, deployment_pod, pod, review

from enforcer.configuration import parse_config
from resource_contract.logformat import JSONFormatter
from webhook.app import MAX_BODY, create_app
from webhook.logs import setup_logging

with warnings.catch_warnings():
    # Starlette's TestClient warns that it prefers another httpx; it works with this one.
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient


@pytest.fixture
def capture_logs() -> Iterator[Any]:
    """setup_logging into a buffer; the root logger is put back afterwards."""
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    streams: list[io.StringIO] = []

    def start(level: str) -> io.StringIO:
        stream = io.StringIO()
        setup_logging(level, stream)
        streams.append(stream)
        return stream

    yield start
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])


def ours(stream: io.StringIO) -> list[dict[str, Any]]:
    records = [json.loads(line) for line in stream.getvalue().splitlines()]
    return [r for r in records if r["logger"].startswith("webhook")]


@pytest.fixture
def app() -> Any:
    return create_app(parse_config(yaml.safe_load(CONFIG_YAML)))


@pytest.fixture
def http(app: Any) -> Iterator[TestClient]:
    with TestClient(app, raise_server_exceptions=False) as c:  # runs the lifespan
        yield c


def metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " ") or (
            line.startswith(name + "{") and line.split(" ")[0] == name
        ):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in metrics")


@pytest.mark.parametrize("path", ["/mutate", "/"])
def test_both_paths_answer(http: TestClient, path: str) -> None:
    r = http.post(path, content=body(review(deployment_pod())))
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/json"
    assert r.json()["response"]["patchType"] == "JSONPatch"


def test_probes(http: TestClient) -> None:
    assert http.get("/healthz").text == "ok\n"
    assert http.get("/readyz").status_code == 200


def test_not_ready_outside_the_lifespan(app: Any) -> None:
    client = TestClient(app)  # not entered: no startup
    assert client.get("/readyz").status_code == 503


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [("GET", "/mutate", 405), ("PUT", "/", 405), ("GET", "/nope", 404), ("POST", "/healthz", 405)],
)
def test_other_routes_and_methods(http: TestClient, method: str, path: str, status: int) -> None:
    assert http.request(method, path).status_code == status


def test_declared_size_over_the_limit_is_413(http: TestClient) -> None:
    big = b" " * (MAX_BODY + 1)
    r = http.post("/mutate", content=big)
    assert r.status_code == 413 and "3 MiB" in r.json()["error"]


def test_chunked_size_over_the_limit_is_413(http: TestClient) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(4):
            yield b" " * (1024 * 1024)

    r = http.post("/mutate", content=chunks())  # no Content-Length: chunked
    assert r.status_code == 413


def test_exactly_the_limit_is_read(http: TestClient) -> None:
    raw = body(review(deployment_pod()))
    padded = raw + b" " * (MAX_BODY - len(raw))
    assert http.post("/mutate", content=padded).status_code == 200


def test_bad_content_length_is_400() -> None:
    app = create_app(None)
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/mutate",
        "headers": [(b"content-length", b"x1")],
    }
    asyncio.run(app(scope, receive, send))
    assert sent[0]["status"] == 400 and b"content-length" in sent[1]["body"]


def test_client_that_left_gets_nothing() -> None:
    app = create_app(None)
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(
        app({"type": "http", "method": "POST", "path": "/mutate", "headers": []}, receive, send)
    )
    assert sent == []


def test_metrics_count_outcomes_latency_and_denials(http: TestClient) -> None:
    before = http.get("/metrics").text
    http.post("/mutate", content=body(review(deployment_pod())))
    bad = pod([container("app")], annotations={"rdtclass.resource-enforcer.dev/pod": "platinum"})
    http.post("/mutate", content=body(review(bad)))
    http.post("/mutate", content=b"nope")
    after = http.get("/metrics").text
    for name, delta in [
        ('resource_webhook_requests_total{outcome="patched"}', 1),
        ('resource_webhook_requests_total{outcome="denied"}', 1),
        ('resource_webhook_requests_total{outcome="invalid"}', 1),
        ('resource_webhook_denials_total{reason="unknown"}', 1),
        ("resource_webhook_request_duration_seconds_count", 3),
    ]:
        assert metric(after, name) - metric(before, name) == delta, name


def test_two_apps_have_separate_registries() -> None:
    a, b = TestClient(create_app(None)), TestClient(create_app(None))
    a.post("/mutate", content=b"x")
    assert metric(a.get("/metrics").text, 'resource_webhook_requests_total{outcome="invalid"}') == 1
    assert metric(b.get("/metrics").text, 'resource_webhook_requests_total{outcome="invalid"}') == 0


def test_failure_in_a_get_route_is_a_503_not_a_500(app: Any) -> None:
    def boom() -> bytes:
        raise RuntimeError("registry broken")

    app.state.metrics.exposition = boom
    with TestClient(app, raise_server_exceptions=False) as c:
        r = c.get("/metrics")
    assert r.status_code == 503 and r.json() == {"error": "internal error: RuntimeError"}


def test_bug_in_the_mutation_is_a_denial_naming_the_request(
    app: Any, caplog: pytest.LogCaptureFixture
) -> None:
    def boom(pod: Any, namespace: str) -> Any:
        raise KeyError("oops")

    app.state.mutator.mutate_decoded = boom
    with TestClient(app) as c:
        r = c.post("/mutate", content=body(review(deployment_pod(), uid="bug-1")))
    assert r.status_code == 200
    response = r.json()["response"]
    assert response["allowed"] is False and response["status"]["code"] == 500
    assert "bug-1" in response["status"]["message"]
    assert metric(c.get("/metrics").text, 'resource_webhook_requests_total{outcome="error"}') == 1
    assert any(rec.levelname == "ERROR" and rec.exc_info for rec in caplog.records)


def test_logs_are_json_with_uid_namespace_and_pod(http: TestClient, capture_logs: Any) -> None:
    stream = capture_logs("debug")
    p = pod(
        [container("app")], annotations={"rdtclass.resource-enforcer.dev/pod": "$"}, name="web-1"
    )
    http.post("/mutate", content=body(review(p, uid="log-1", namespace="shop")))
    http.post("/mutate", content=body(review(deployment_pod(), uid="log-2")))
    records = ours(stream)
    denied = next(r for r in records if r.get("uid") == "log-1")
    assert denied["level"] == "warning" and denied["outcome"] == "denied"
    assert (denied["namespace"], denied["pod"], denied["reason"]) == ("shop", "web-1", "malformed")
    patched = next(r for r in records if r.get("uid") == "log-2")
    assert patched["level"] == "debug" and patched["pod"] == "web-7d4b9c8f6d-*"
    assert patched["latency_ms"] >= 0 and "time" in patched


def test_routine_admissions_are_not_logged_at_info(http: TestClient, capture_logs: Any) -> None:
    stream = capture_logs("info")
    http.post("/mutate", content=body(review(deployment_pod())))
    assert ours(stream) == []


def test_json_formatter_keeps_exceptions() -> None:
    try:
        raise ValueError("x")
    except ValueError:
        import sys

        record = logging.LogRecord(
            "t", logging.ERROR, __file__, 1, "failed %s", ("here",), sys.exc_info()
        )
    out = json.loads(JSONFormatter().format(record))
    assert out["msg"] == "failed here" and "ValueError: x" in out["exc"]


# --- fuzz over HTTP: no request makes a 500 ---------------------------------------------------

_FUZZ_APP = create_app(parse_config(yaml.safe_load(CONFIG_YAML)))
_FUZZ_CLIENT = TestClient(_FUZZ_APP, raise_server_exceptions=False)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=6),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=12,
)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    st.sampled_from(["/mutate", "/", "/healthz", "/metrics", "/readyz", "/x"]),
    st.sampled_from(["POST", "GET", "PUT"]),
    st.one_of(json_values.map(lambda v: json.dumps(v).encode()), st.binary(max_size=40)),
)
def test_fuzz_no_request_gets_a_500(path: str, method: str, raw: bytes) -> None:
    r = _FUZZ_CLIENT.request(method, path, content=raw)
    assert r.status_code < 500 or (path == "/readyz" and r.status_code == 503)
