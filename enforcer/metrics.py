"""The enforcer's Prometheus metrics and its small HTTP endpoint (/metrics, /healthz)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from enforcer.build import version

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10)


class EnforcerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.cri_calls = Counter(
            "resource_enforcer_cri_calls",
            "CRI calls through the relay",
            ["method", "code"],
            registry=r,
        )
        self.cri_seconds = Histogram(
            "resource_enforcer_cri_call_seconds",
            "CRI call latency through the relay",
            ["method"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.decisions = Counter(
            "resource_enforcer_policy_decisions",
            "containers placed, by placement kind",
            ["policy", "kind"],
            registry=r,
        )
        self.refusals = Counter(
            "resource_enforcer_policy_refusals",
            "CreateContainer calls refused, by reason",
            ["reason"],
            registry=r,
        )
        self.cpus = Gauge(
            "resource_enforcer_cpus",
            "CPUs by use: exclusive, shared, reserved, free",
            ["use"],
            registry=r,
        )
        self.reloads = Counter(
            "resource_enforcer_config_reloads",
            "configuration reloads, by outcome",
            ["outcome"],
            registry=r,
        )
        self.controller_errors = Counter(
            "resource_enforcer_controller_errors",
            "failures writing controller settings",
            ["controller"],
            registry=r,
        )
        self.class_applications = Counter(
            "resource_enforcer_class_applications",
            "RDT and block-I/O class applications",
            ["kind", "class_name", "outcome"],
            registry=r,
        )
        self.repairs = Counter(
            "resource_enforcer_cpuset_repairs",
            "running containers whose cpuset the kernel had wrong, found and repaired",
            registry=r,
        )
        self.unrepaired = Counter(
            "resource_enforcer_cpuset_repairs_failed",
            "repairs that did not take: the container is reported in status and the log",
            registry=r,
        )
        self.held = Gauge(
            "resource_enforcer_containers_held",
            "running containers the configuration cannot place, kept on the CPUs they hold",
            registry=r,
        )
        self.state_writable = Gauge(
            "resource_enforcer_state_writable",
            "1 while the state can be saved; 0 while the state folder cannot be written or the "
            "saved state cannot be read (new containers and resizes are refused meanwhile)",
            registry=r,
        )
        self.build_info = Gauge(
            "resource_enforcer_build_info",
            "The running build: always 1, its version as a label",
            ["version"],
            registry=r,
        )
        self.build_info.labels(version()).set(1)

        # (method path, code) -> its counter and histogram children: observe_call runs on the
        # relay's event loop for every call, and labels() lookups cost more than the counting.
        self._call_children: dict[tuple[str, int], tuple[Any, Any]] = {}

    def observe_call(self, method: str, code: int, seconds: float) -> None:
        children = self._call_children.get((method, code))
        if children is None:
            name = method.rsplit("/", 1)[-1]
            children = (self.cri_calls.labels(name, str(code)), self.cri_seconds.labels(name))
            if len(self._call_children) < 1024:  # unknown methods must not grow it unbounded
                self._call_children[(method, code)] = children
        children[0].inc()
        children[1].observe(seconds)


class _IPv6Server(ThreadingHTTPServer):
    address_family = socket.AF_INET6


class MetricsServer:
    """GET /metrics and /healthz on host:port, in a daemon thread."""

    def __init__(
        self, address: str, metrics: EnforcerMetrics, healthy: Callable[[], bool] = lambda: True
    ) -> None:
        host, _, port = address.rpartition(":")
        registry = metrics.registry

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] == "/metrics":
                    body, ctype, code = generate_latest(registry), CONTENT_TYPE_LATEST, 200
                elif self.path == "/healthz":
                    ok = healthy()
                    body, ctype, code = (
                        (b"ok\n" if ok else b"unhealthy\n"),
                        "text/plain",
                        (200 if ok else 503),
                    )
                else:
                    body, ctype, code = b"not found\n", "text/plain", 404
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass  # scrapes every few seconds would drown the log

        host = host.strip("[]") or "0.0.0.0"
        server_class = _IPv6Server if ":" in host else ThreadingHTTPServer
        self.server = server_class((host, int(port)), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(
            target=self.server.serve_forever, daemon=True, name="metrics"
        )

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    def start(self) -> MetricsServer:
        self.thread.start()
        return self

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
