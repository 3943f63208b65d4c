"""deploy/monitoring/grafana-dashboard.json queries only metrics the programs really export.

A real enforcer in each mode (console script: the relay in front of the private containerd 1.6,
and `resource-enforcer nri` registered with the private containerd 1.7; a pod placed through
each) and a real webhook (console script, over TLS) are scraped; every PromQL expression of the
dashboard (panels and template variables) is parsed with a PromQL parser, and each metric name
it selects must be among the sample names scraped from the program it belongs to.
"""

from __future__ import annotations

import json
import re
import ssl
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import promql_parser
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.containerd import PrivateContainerd
from tests.support.containerd17 import NriContainerd
from tests.support.enforcer_process import EnforcerProcess, free_port
from tests.support.kubelet import KubeletEmulator
from tests.support.nri_enforcer import NriEnforcerProcess
from tests.support.pods import guaranteed, manifest, sleeper

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "webhook"))
from wh_support import WebhookServer, make_certs

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "monitoring" / "grafana-dashboard.json"
ALL = Path("/sys/fs/cgroup/cpuset/cpuset.cpus").read_text().strip()
# Grafana's own variables, as Grafana substitutes them before the query reaches Prometheus.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "1h"}


def expressions(dashboard: dict[str, Any]) -> list[str]:
    """Every PromQL expression: panel targets (rows' nested panels too) and query variables."""
    found: list[str] = []

    def panels(items: list[dict[str, Any]]) -> None:
        for panel in items:
            found.extend(t["expr"] for t in panel.get("targets", []))
            panels(panel.get("panels", []))

    panels(dashboard["panels"])
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            # label_values(METRIC, label) is Grafana's, around a selector.
            m = re.fullmatch(r"label_values\((.+),\s*\w+\)", query)
            found.append(m.group(1) if m else query)
    return found


def metric_names(expr: str) -> set[str]:
    for var, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(var, value)
    names: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            assert node.name, f"a selector without a metric name cannot be checked: {expr}"
            names.add(node.name)
            return
        for attr in ("lhs", "rhs", "expr", "param", "vector_selector"):
            child = getattr(node, attr, None)
            if child is not None:
                walk(child)
        for child in getattr(node, "args", None) or []:
            walk(child)

    walk(promql_parser.parse(expr))
    return names


def scraped(text: str) -> set[str]:
    return {s.name for family in text_string_to_metric_families(text) for s in family.samples}


# The relay's scrape, on the system's containerd only (tests/e2e/conftest.py would run it on
# 1.7 as well).
@pytest.fixture(scope="session")
def containerd(containerd16: PrivateContainerd) -> PrivateContainerd:
    return containerd16


def _static_config(path: Path) -> str:
    reserved = ALL.replace("-", ",").split(",")[0]
    path.write_text(f'policy: {{name: static, reservedCPUs: "{reserved}"}}\n')
    return str(path)


@pytest.fixture
def enforcer(containerd: PrivateContainerd, tmp_path: Path) -> Iterator[EnforcerProcess]:
    proc = EnforcerProcess(
        tmp_path / "enforcer",
        runtime_socket=containerd.socket,
        config=_static_config(tmp_path / "config.yaml"),
        metrics_address=f"127.0.0.1:{free_port()}",
    ).start()
    try:
        yield proc
    finally:
        assert proc.stop() == 0


@pytest.fixture
def nri_plugin(containerd17: NriContainerd, tmp_path: Path) -> Iterator[NriEnforcerProcess]:
    proc = NriEnforcerProcess(
        tmp_path / "nri-enforcer",
        nri_socket=containerd17.nri_socket,
        config=_static_config(tmp_path / "nri-config.yaml"),
        metrics_address=f"127.0.0.1:{free_port()}",
    ).start()
    try:
        yield proc
    finally:
        assert proc.stop() == 0


def scrape_after_a_pod(socket: str, metrics_url: str, logs: Path) -> str:
    """The enforcer's /metrics once a pod placed through ``socket`` shows in its gauges."""
    with KubeletEmulator(socket, log_root=logs) as kubelet:
        kubelet.run_pod(manifest("dash", sleeper(resources=guaranteed("1"))))
        deadline = time.monotonic() + 15
        while True:
            with urllib.request.urlopen(metrics_url + "/metrics", timeout=5) as r:
                text = r.read().decode()
            if "resource_enforcer_numa_node_cpus{" in text or time.monotonic() > deadline:
                return text
            time.sleep(0.2)


@pytest.fixture
def webhook(tmp_path: Path) -> Iterator[tuple[WebhookServer, Path]]:
    certs = make_certs(tmp_path / "certs")
    server = WebhookServer(tmp_path, certs / "tls.crt", certs / "tls.key")
    try:
        server.wait_ready(certs / "ca.crt")
        yield server, certs / "ca.crt"
    finally:
        server.stop()


def test_every_dashboard_query_names_an_exported_metric(
    enforcer: EnforcerProcess,
    nri_plugin: NriEnforcerProcess,
    containerd17: NriContainerd,
    webhook: tuple[WebhookServer, Path],
    tmp_path: Path,
) -> None:
    # Some work through the relay and through the NRI plugin: CRI calls or NRI requests, a
    # placement, the gauges by pool and NUMA node.
    relay_text = scrape_after_a_pod(enforcer.relay_socket, enforcer.metrics_url, tmp_path / "r")
    nri_text = scrape_after_a_pod(containerd17.socket, nri_plugin.metrics_url, tmp_path / "n")
    server, ca = webhook
    ctx = ssl.create_default_context(cafile=str(ca))
    with urllib.request.urlopen(f"{server.url}/metrics", timeout=5, context=ctx) as r:
        webhook_text = r.read().decode()
    exported = {
        "resource_enforcer_": scraped(relay_text) | scraped(nri_text),
        "resource_webhook_": scraped(webhook_text),
    }

    dashboard = json.loads(DASHBOARD.read_text())
    queries = expressions(dashboard)
    assert len(queries) >= 20
    named: set[str] = set()
    missing = []
    for expr in queries:
        names = metric_names(expr)
        assert names, f"no metric in {expr}"
        for name in names:
            named.add(name)
            program = next((p for p in exported if name.startswith(p)), None)
            if program is None or name not in exported[program]:
                missing.append((name, expr))
    assert missing == [], "queries name metrics nobody exports"
    # The dashboard covers the new gauges and both programs.
    assert {
        "resource_enforcer_numa_node_cpus",
        "resource_enforcer_pool_cpus",
        "resource_enforcer_cri_call_seconds_bucket",
        "resource_enforcer_nri_calls_total",
        "resource_enforcer_nri_call_seconds_bucket",
        "resource_webhook_request_duration_seconds_bucket",
        "resource_webhook_requests_total",
    } <= named


def test_the_checker_catches_a_made_up_metric() -> None:
    """What the test above relies on: names inside functions, aggregations, binary operations,
    subqueries and label_values() are all found."""
    expr = (
        'sum by (a) (rate(x_total{b="$v"}[$__rate_interval])) / on() group_left '
        "max_over_time(y[5m:1m]) + histogram_quantile(0.9, rate(z_bucket[1m]))"
    )
    assert metric_names(expr) == {"x_total", "y", "z_bucket"}
    board = {
        "panels": [{"type": "row", "panels": [{"targets": [{"expr": "-w"}]}]}],
        "templating": {"list": [{"type": "query", "query": "label_values(v_info, instance)"}]},
    }
    assert expressions(board) == ["-w", "v_info"]
