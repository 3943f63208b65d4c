"""The enforcer's metrics take no label value from a peer."""

from __future__ import annotations

import time

import pytest

from enforcer.cri import api_pb2
from enforcer.metrics import (
    CRI_METHODS,
    NRI_EVENTS,
    NRI_PLUGIN_METHODS,
    NRI_SENT_METHODS,
    EnforcerMetrics,
)
from enforcer.nriapi import api_pb2 as nri_pb2
from resource_contract.config import ConfigError, parse_config


def test_the_allowlist_is_every_method_of_the_cri_services() -> None:
    paths = {
        f"/runtime.v1.{service}/{method.name}"
        for service in ("RuntimeService", "ImageService")
        for method in api_pb2.DESCRIPTOR.services_by_name[service].methods
    }
    assert set(CRI_METHODS) == paths


def test_unknown_methods_and_codes_share_bounded_series() -> None:
    metrics = EnforcerMetrics()
    for i in range(500):
        metrics.observe_call(f"/runtime.v1.RuntimeService/Made{i}", 12, 0.001)
        metrics.observe_call(f"/x{i}", 1000 + i, 0.001)
    metrics.observe_call("/runtime.v1.RuntimeService/Version", 0, 0.001)
    sample = metrics.registry.get_sample_value
    assert sample("resource_enforcer_cri_calls_total", {"method": "other", "code": "12"}) == 500
    assert sample("resource_enforcer_cri_calls_total", {"method": "other", "code": "-1"}) == 500
    assert sample("resource_enforcer_cri_calls_total", {"method": "Version", "code": "0"}) == 1
    assert len(metrics._cri.calls) == 3 and len(metrics._cri.latency) == 2


def test_the_nri_allowlists_are_nris_own_methods_and_events() -> None:
    plugin = nri_pb2.DESCRIPTOR.services_by_name["Plugin"]
    assert set(NRI_PLUGIN_METHODS) == {m.name for m in plugin.methods}
    runtime = {m.name for m in nri_pb2.DESCRIPTOR.services_by_name["Runtime"].methods}
    assert set(NRI_SENT_METHODS) <= runtime
    events = set(nri_pb2.Event.keys()) - {"UNKNOWN", "LAST"}
    assert set(NRI_EVENTS) == events


def test_nri_calls_share_bounded_series() -> None:
    metrics = EnforcerMetrics()
    for i in range(500):
        metrics.observe_nri("StateChange", 0, 0.001, f"EVENT_{i}")
        metrics.observe_nri(f"Made{i}", 2000 + i, 0.001, "RUN_POD_SANDBOX")
    metrics.observe_nri("StateChange", 0, 0.002, "START_CONTAINER")
    metrics.observe_nri("CreateContainer", 8, 0.003, "START_CONTAINER")
    sample = metrics.registry.get_sample_value
    calls = "resource_enforcer_nri_calls_total"
    assert sample(calls, {"method": "StateChange", "event": "other", "code": "0"}) == 500
    assert sample(calls, {"method": "other", "event": "", "code": "-1"}) == 500
    assert sample(calls, {"method": "StateChange", "event": "START_CONTAINER", "code": "0"}) == 1
    # An event belongs to StateChange only.
    assert sample(calls, {"method": "CreateContainer", "event": "", "code": "8"}) == 1
    seconds = "resource_enforcer_nri_call_seconds_count"
    assert sample(seconds, {"method": "CreateContainer", "event": ""}) == 1
    assert len(metrics._nri_children) == 4


def test_metrics_address_in_the_configuration() -> None:
    assert parse_config({}).metrics.address == "127.0.0.1:8891"  # loopback by default
    assert parse_config({"metrics": {"address": ""}}).metrics.address == ""
    with pytest.raises(ConfigError, match=r"metrics\.address"):
        parse_config({"metrics": {"address": "everywhere"}})


def test_cri_call_series_read_as_prometheus_counter_and_histogram_would_show_them() -> None:
    """The relay's call tally shows exactly the samples of a prometheus Counter and
    Histogram fed the same calls (bar the Counter's `_created` timestamps)."""
    from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

    from enforcer.metrics import _LATENCY_BUCKETS

    reference = CollectorRegistry()
    calls = Counter("resource_enforcer_cri_calls", "CRI calls through the relay",
                    ["method", "code"], registry=reference)  # fmt: skip
    seconds = Histogram("resource_enforcer_cri_call_seconds", "CRI call latency through the relay",
                        ["method"], buckets=_LATENCY_BUCKETS, registry=reference)  # fmt: skip
    started = time.time() - 1
    metrics = EnforcerMetrics()
    observed = [
        ("/runtime.v1.RuntimeService/Version", 0, 0.0002),
        ("/runtime.v1.RuntimeService/Version", 0, 0.0005),  # on a bucket's bound
        ("/runtime.v1.RuntimeService/Version", 14, 0.003),
        ("/runtime.v1.RuntimeService/CreateContainer", 0, 12.0),  # past the last bound
        ("/runtime.v1.ImageService/PullImage", 2, 1.0),
    ]
    for method, code, took in observed:
        metrics.observe_call(method, code, took)
        name = CRI_METHODS[method]
        calls.labels(name, str(code)).inc()
        seconds.labels(name).observe(took)

    def series(registry: CollectorRegistry) -> list[str]:
        text = generate_latest(registry).decode()
        lines = [line for line in text.splitlines() if "resource_enforcer_cri_call" in line]
        # A series' creation time: the same series, its value a time of this run.
        samples = [line for line in lines if not line.startswith("#")]
        for line in samples:
            if "_created" in line:
                assert float(line.rsplit(" ", 1)[1]) >= started
        return sorted(
            line.rsplit(" ", 1)[0] if "_created" in line and line in samples else line
            for line in lines
        )

    assert series(metrics.registry) == series(reference)
