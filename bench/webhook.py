"""Webhook benchmark: `resource-webhook serve` against a bare ASGI app, same TLS, same run.

Both servers are started the same way (uvicorn through `webhook.server.run`, the reloading
TLS context, TLS 1.3, HTTP/1.1 keep-alive) and get the same request: an AdmissionReview of a
Deployment's pod. The bare app reads the body and answers the very bytes the webhook answers,
so the difference between the two is the webhook's own work.

Measured, alternating the two servers round by round so that noise from other processes hits
both alike:
- closed loop at fixed concurrency: requests/s, p50 and p99 latency, and the server's CPU time
  per request (from /proc; the steadiest figure on a shared machine). The client is `wrk` when
  installed, else a Python client (asyncio + ssl) in this process.
- open loop at a fixed rate (200 requests/s): p50, p99 and max latency, counted from when each
  request was due, so a stall is not hidden by the client waiting for it.
On a machine with 2 or more CPUs the servers are pinned to CPU 0 and the client to CPU 1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


# --- the request ------------------------------------------------------------------------------


def sample_review(uid: str = "0f5d4b9e-7d5b-4b6e-9a51-3c1f2d8e6a70") -> dict[str, Any]:
    """A CREATE of a Deployment's pod as the API server sends it (managedFields included):
    an init container, the app, a sidecar, a pod-level RDT class request."""
    container_fields = {
        "f:image": {},
        "f:imagePullPolicy": {},
        "f:name": {},
        "f:resources": {".": {}, "f:limits": {".": {}, "f:cpu": {}, "f:memory": {}}},
        "f:terminationMessagePath": {},
        "f:terminationMessagePolicy": {},
    }
    pod = {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "generateName": "shop-web-7d4b9c8f6d-",
            "namespace": "shop",
            "creationTimestamp": None,
            "labels": {"app": "shop-web", "pod-template-hash": "7d4b9c8f6d", "tier": "frontend"},
            "annotations": {
                "rdtclass.resource-enforcer.dev/pod": "gold",
                "kubectl.kubernetes.io/restartedAt": "2026-11-20T10:00:00Z",
            },
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "shop-web-7d4b9c8f6d",
                    "uid": "4c0a9a3e-96a7-4d38-8a9f-7b8f1f2f9c11",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "managedFields": [
                {
                    "manager": "kube-controller-manager",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": "2026-11-20T10:00:01Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {
                        "f:metadata": {
                            "f:generateName": {},
                            "f:labels": {".": {}, "f:app": {}, "f:pod-template-hash": {}},
                            "f:ownerReferences": {".": {}, 'k:{"uid":"4c0a9a3e"}': {}},
                        },
                        "f:spec": {
                            "f:containers": {
                                'k:{"name":"app"}': container_fields,
                                'k:{"name":"envoy"}': container_fields,
                            },
                            "f:initContainers": {'k:{"name":"migrate"}': container_fields},
                            "f:dnsPolicy": {},
                            "f:restartPolicy": {},
                        },
                    },
                }
            ],
        },
        "spec": {
            "volumes": [
                {
                    "name": "kube-api-access-8xk2p",
                    "projected": {
                        "sources": [
                            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                            {
                                "configMap": {
                                    "name": "kube-root-ca.crt",
                                    "items": [{"key": "ca.crt", "path": "ca.crt"}],
                                }
                            },
                        ],
                        "defaultMode": 420,
                    },
                }
            ],
            "initContainers": [
                {
                    "name": "migrate",
                    "image": "registry.example/shop/migrate:1.4.2",
                    "command": ["/migrate", "--wait"],
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                }
            ],
            "containers": [
                {
                    "name": "app",
                    "image": "registry.example/shop/web:1.4.2",
                    "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                    "env": [{"name": "GOMAXPROCS", "value": "2"}],
                    "resources": {
                        "requests": {"cpu": "2", "memory": "1Gi"},
                        "limits": {"cpu": "2", "memory": "1Gi"},
                    },
                    "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}},
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                },
                {
                    "name": "envoy",
                    "image": "registry.example/envoy:1.29",
                    "resources": {
                        "requests": {"cpu": "250m", "memory": "128Mi"},
                        "limits": {"cpu": "500m", "memory": "256Mi"},
                    },
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                },
            ],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "securityContext": {},
            "schedulerName": "default-scheduler",
            "tolerations": [
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                }
            ],
            "priority": 0,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
        },
        "status": {},
    }
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "shop",
            "operation": "CREATE",
            "userInfo": {
                "username": "system:serviceaccount:kube-system:replicaset-controller",
                "uid": "8d3c1a60-2a57-4b8e-b6a0-61f1c3c1d9a2",
                "groups": [
                    "system:serviceaccounts",
                    "system:serviceaccounts:kube-system",
                    "system:authenticated",
                ],
            },
            "object": pod,
            "oldObject": None,
            "dryRun": False,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
        },
    }


UID_MARK, MEMORY_MARK = "@UID@", "@MEM@"


def distinct_template() -> bytes:
    """The sample review with marks where each request gets its own uid and its own memory
    size for the app container (request = limit): every review is a pod the webhook has not
    seen, so no memoized annotation or patch answers it."""
    r = sample_review(uid=UID_MARK)
    app = r["request"]["object"]["spec"]["containers"][0]["resources"]
    app["requests"]["memory"] = app["limits"]["memory"] = MEMORY_MARK
    return json.dumps(r, separators=(",", ":")).encode()


def distinct_body(template: bytes, n: int) -> bytes:
    """The n-th distinct review, as the wrk script below makes it."""
    uid = f"{n:08x}-0000-4000-8000-{n:012x}"
    return template.replace(UID_MARK.encode(), uid.encode()).replace(
        MEMORY_MARK.encode(), f"{1048576 + n}Ki".encode()
    )


# --- the bare app -----------------------------------------------------------------------------


def bare_app(answer: bytes) -> Any:
    """An ASGI app that reads the request body and answers `answer`: the floor the webhook
    is measured against."""
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(answer)).encode()),
    ]

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        more = True
        while more:
            message = await receive()
            more = message.get("more_body", False)
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": answer})

    return app


def serve_bare(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.webhook serve-bare")
    parser.add_argument("--tls-cert", required=True)
    parser.add_argument("--tls-key", required=True)
    parser.add_argument("--answer", required=True, help="file with the response body")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    from webhook.logs import setup_logging
    from webhook.server import bind, run
    from webhook.tls import ReloadingTLS

    setup_logging("info")
    app = bare_app(Path(args.answer).read_bytes())
    run(app, bind(args.host, args.port), ReloadingTLS(args.tls_cert, args.tls_key))
    return 0


# --- servers ----------------------------------------------------------------------------------


@dataclass
class Server:
    name: str
    process: subprocess.Popen[bytes]
    port: int
    log: Path

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _pin(cpu: int | None) -> Any:
    if cpu is None:
        return None
    return lambda: os.sched_setaffinity(0, {cpu})


def start_server(name: str, cmd: list[str], log: Path, cpu: int | None) -> Server:
    out = log.open("wb")
    process = subprocess.Popen(cmd, stdout=out, stderr=out, preexec_fn=_pin(cpu))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited {process.returncode}:\n{log.read_text()}")
        match = re.search(r'"msg": "serving".*?"port": (\d+)', log.read_text())
        if match and "startup complete" in log.read_text():
            return Server(name, process, int(match.group(1)), log)
        time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"{name} did not start:\n{log.read_text()}")


# --- clients ----------------------------------------------------------------------------------


def _request_bytes(body: bytes) -> bytes:
    head = (
        "POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


class Connection:
    """One keep-alive HTTPS connection, as lean as a client can be in Python."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int, ctx: ssl.SSLContext) -> Connection:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=ctx, server_hostname="localhost"
        )
        return cls(reader, writer)

    async def call(self, raw: bytes) -> int:
        self.writer.write(raw)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        match = re.search(rb"(?i)content-length: *(\d+)", head)
        await self.reader.readexactly(int(match.group(1)) if match else 0)
        return status

    def close(self) -> None:
        self.writer.close()


@dataclass
class Run:
    server: str
    client: str
    requests: int
    seconds: float
    rps: float
    p50_ms: float
    p99_ms: float
    max_ms: float | None = None
    errors: int = 0
    cpu_us_per_request: float | None = None


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, round(q * len(sorted_values)) - 1))
    return sorted_values[index]


async def _closed_loop(
    port: int, ctx: ssl.SSLContext, raw: bytes, concurrency: int, seconds: float
) -> tuple[list[float], int, float]:
    connections = [await Connection.open(port, ctx) for _ in range(concurrency)]
    latencies: list[float] = []
    errors = 0
    start = time.perf_counter()
    deadline = start + seconds

    async def worker(conn: Connection) -> None:
        nonlocal errors
        while (now := time.perf_counter()) < deadline:
            status = await conn.call(raw)
            latencies.append(time.perf_counter() - now)
            errors += status != 200

    await asyncio.gather(*(worker(c) for c in connections))
    elapsed = time.perf_counter() - start
    for c in connections:
        c.close()
    return latencies, errors, elapsed


async def _open_loop(
    port: int,
    ctx: ssl.SSLContext,
    raw: bytes | list[bytes],
    rate: float,
    seconds: float,
    connections: int,
) -> tuple[list[float], int, float]:
    """`raw`: one request, or a list of them sent in turn."""
    bodies = [raw] if isinstance(raw, bytes) else raw
    pool = [await Connection.open(port, ctx) for _ in range(connections)]
    due: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue()
    latencies: list[float] = []
    errors = 0

    async def worker(conn: Connection) -> None:
        nonlocal errors
        while (item := await due.get()) is not None:
            when, request = item
            status = await conn.call(request)
            latencies.append(time.perf_counter() - when)
            errors += status != 200

    workers = [asyncio.create_task(worker(c)) for c in pool]
    total = int(rate * seconds)
    start = time.perf_counter() + 0.05
    for i in range(total):
        when = start + i / rate
        delay = when - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        due.put_nowait((when, bodies[i % len(bodies)]))
    for _ in pool:
        due.put_nowait(None)
    await asyncio.gather(*workers)
    elapsed = time.perf_counter() - start
    for c in pool:
        c.close()
    return latencies, errors, elapsed


def _summary(server: str, client: str, latencies: list[float], errors: int, elapsed: float) -> Run:
    values = sorted(latencies)
    return Run(
        server=server,
        client=client,
        requests=len(values),
        seconds=round(elapsed, 3),
        rps=round(len(values) / elapsed, 1),
        p50_ms=round(_percentile(values, 0.50) * 1000, 3),
        p99_ms=round(_percentile(values, 0.99) * 1000, 3),
        max_ms=round(values[-1] * 1000, 3) if values else None,
        errors=errors,
    )


_WRK_LUA = """wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = assert(io.open("{body}", "rb"))
wrk.body = f:read("*a")
f:close()
"""

# A distinct pod in every request, as bench.webhook.distinct_body makes them.
_WRK_LUA_DISTINCT = """wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = assert(io.open("{template}", "rb"))
local template = f:read("*a")
f:close()
local n = {start}
request = function()
  n = n + 1
  local uid = string.format("%08x-0000-4000-8000-%012x", n, n)
  local body = template:gsub("{uid}", uid):gsub("{memory}", tostring(1048576 + n) .. "Ki")
  return wrk.format(nil, nil, nil, body)
end
"""


def _wrk_ms(text: str) -> float:
    number, unit = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text).groups()  # type: ignore[union-attr]
    return round(float(number) * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}[unit], 6)


def parse_wrk(output: str) -> dict[str, float]:
    """requests, seconds, rps, p50_ms, p99_ms and errors from `wrk --latency` output."""
    found = re.search(r"(\d+) requests in ([\d.]+)(ms|s|m)", output)
    if not found:
        raise ValueError(f"unexpected wrk output:\n{output}")
    seconds = float(found.group(2)) * {"ms": 0.001, "s": 1.0, "m": 60.0}[found.group(3)]
    latency = dict(re.findall(r"^\s+(50|99)%\s+([\d.]+(?:us|ms|s|m))\s*$", output, re.M))
    errors = 0
    for pattern in (r"Non-2xx or 3xx responses: (\d+)", r"Socket errors: (.*)"):
        m = re.search(pattern, output)
        if m:
            errors += sum(int(n) for n in re.findall(r"\d+", m.group(1)))
    return {
        "requests": int(found.group(1)),
        "seconds": seconds,
        "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1)),  # type: ignore[union-attr]
        "p50_ms": _wrk_ms(latency["50"]),
        "p99_ms": _wrk_ms(latency["99"]),
        "errors": errors,
    }


def _wrk(server: Server, lua: Path, concurrency: int, seconds: float, cpu: int | None) -> Run:
    cmd = [
        "wrk", "-t1", f"-c{concurrency}", f"-d{max(1, round(seconds))}s", "--latency",
        "-s", str(lua), f"https://127.0.0.1:{server.port}/mutate",
    ]  # fmt: skip
    output = subprocess.run(
        cmd,
        check=True,
        capture_output=True,
        text=True,
        preexec_fn=_pin(cpu),
    ).stdout
    figures = parse_wrk(output)
    return Run(
        server=server.name,
        client="wrk",
        requests=int(figures["requests"]),
        seconds=figures["seconds"],
        rps=figures["rps"],
        p50_ms=figures["p50_ms"],
        p99_ms=figures["p99_ms"],
        errors=int(figures["errors"]),
    )


# --- the benchmark ----------------------------------------------------------------------------


@dataclass
class Report:
    command: str
    client: str
    concurrency: int
    rounds: int
    seconds_per_round: float
    rate: float
    pinned: bool
    same_pod: bool = False
    peak_rss_mib: dict[str, float | None] = field(default_factory=dict)
    closed_loop: list[Run] = field(default_factory=list)
    open_loop: list[Run] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)


def _median(runs: list[Run], attr: str) -> float:
    values = [getattr(r, attr) for r in runs if getattr(r, attr) is not None]
    return round(statistics.median(values), 3) if values else float("nan")


SERVERS = ("webhook", "bare", "go")


def _ratio(report: Report, num: str, den: str, attr: str, invert: bool = False) -> float | None:
    """The median over rounds of num/den (den/num with `invert`), round by round, so a noisy
    moment hits both sides."""
    pairs = list(
        zip(
            [r for r in report.closed_loop if r.server == num],
            [r for r in report.closed_loop if r.server == den],
            strict=False,
        )
    )
    values = [
        (getattr(d, attr) / getattr(n, attr)) if invert else (getattr(n, attr) / getattr(d, attr))
        for n, d in pairs
        if getattr(n, attr) and getattr(d, attr)
    ]
    return round(statistics.median(values), 3) if values else None


def _summarize(report: Report) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in SERVERS:
        runs = [r for r in report.closed_loop if r.server == name]
        if not runs:
            continue
        paced = [r for r in report.open_loop if r.server == name]
        cpu = _median(runs, "cpu_us_per_request")
        out[name] = {
            "rps": _median(runs, "rps"),
            "p50_ms": _median(runs, "p50_ms"),
            "p99_ms": _median(runs, "p99_ms"),
            "cpu_us_per_request": cpu,
            "cpu_seconds_per_1000": round(cpu / 1000, 4),
            "peak_rss_mib": report.peak_rss_mib.get(name),
            f"p50_ms_at_{report.rate:g}_rps": paced[0].p50_ms if paced else None,
            f"p99_ms_at_{report.rate:g}_rps": paced[0].p99_ms if paced else None,
            f"max_ms_at_{report.rate:g}_rps": paced[0].max_ms if paced else None,
        }
    out["throughput_ratio"] = _ratio(report, "webhook", "bare", "rps")
    cpu_ratio = _ratio(report, "webhook", "bare", "cpu_us_per_request", invert=True)
    if cpu_ratio is not None:
        out["cpu_ratio"] = cpu_ratio
    if "go" in out:
        out["go_throughput_ratio"] = _ratio(report, "webhook", "go", "rps")
        out["go_cpu_ratio"] = _ratio(report, "webhook", "go", "cpu_us_per_request", invert=True)
    return out


def _print(report: Report) -> None:
    pinning = "servers on CPU 0, client on CPU 1" if report.pinned else "not pinned"
    pods = "the same pod in every request" if report.same_pod else "a distinct pod in every request"
    print(
        f"\nclosed loop: {report.client}, {report.concurrency} connections, {report.rounds} x "
        f"{report.seconds_per_round:g} s per server, alternating; {pinning}; {pods}"
    )
    columns = ("server", "round", "req/s", "p50 ms", "p99 ms", "CPU us/req", "errors")
    print("  {:8s} {:>5s} {:>9s} {:>8s} {:>8s} {:>10s} {:>6s}".format(*columns))
    per_round = len({r.server for r in report.closed_loop}) or 1
    for i, r in enumerate(report.closed_loop):
        cpu = f"{r.cpu_us_per_request:.1f}" if r.cpu_us_per_request else "-"
        print(
            f"  {r.server:8s} {i // per_round + 1:5d} {r.rps:9.1f} {r.p50_ms:8.3f} "
            f"{r.p99_ms:8.3f} {cpu:>10s} {r.errors:6d}"
        )
    print(f"\nopen loop: {report.rate:g} requests/s")
    for r in report.open_loop:
        print(
            f"  {r.server:8s} {r.requests:6d} requests  p50 {r.p50_ms:.3f} ms  "
            f"p99 {r.p99_ms:.3f} ms  max {r.max_ms} ms  errors {r.errors}"
        )
    s = report.summary
    print("\nsummary (medians over rounds):")
    for name in SERVERS:
        if name not in s:
            continue
        f = s[name]
        print(
            f"  {name:8s} {f['rps']:9.1f} req/s  p50 {f['p50_ms']:.3f} ms  "
            f"p99 {f['p99_ms']:.3f} ms  CPU {f['cpu_us_per_request']} us/req "
            f"({f['cpu_seconds_per_1000']} CPU s per 1000)  peak RSS {f['peak_rss_mib']} MiB"
        )
    if "go" in s:
        print(f"  throughput ratio webhook/Go: {s['go_throughput_ratio']}  (goal >= 1.0)")
        print(f"  CPU-per-request ratio Go/webhook: {s['go_cpu_ratio']}")
    else:
        print("  Go baseline: not run (see above)")
    print(f"  throughput ratio webhook/bare ASGI app: {s['throughput_ratio']}")
    if "cpu_ratio" in s:
        print(f"  CPU-per-request ratio bare/webhook: {s['cpu_ratio']}")
    p99 = s["webhook"][f"p99_ms_at_{report.rate:g}_rps"]
    print(f"  webhook p99 at {report.rate:g} req/s: {p99} ms  (goal <= 10 ms)")


def peak_rss_mib(pid: int) -> float | None:
    """VmHWM: the most resident memory the process has had."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def main(argv: Sequence[str] = ()) -> int:
    if argv and argv[0] == "serve-bare":
        return serve_bare(argv[1:])
    parser = argparse.ArgumentParser(
        prog="python -m bench webhook", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--concurrency", type=int, default=16, help="connections, closed loop")
    parser.add_argument("--seconds", type=float, default=5, help="per round and server")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rate", type=float, default=200, help="requests/s, open loop")
    parser.add_argument("--rate-seconds", type=float, default=10)
    parser.add_argument("--client", choices=("auto", "wrk", "python"), default="auto")
    parser.add_argument("--no-pin", action="store_true", help="do not pin servers and client")
    parser.add_argument(
        "--same-pod", action="store_true", help="the same pod in every request (caches answer)"
    )
    parser.add_argument("--no-go", action="store_true", help="leave the Go baseline out")
    parser.add_argument("--json", type=Path, default=RESULTS / "webhook.json")
    args = parser.parse_args(list(argv))

    client = args.client
    if client == "auto":
        client = "wrk" if shutil.which("wrk") else "python"
    pinned = not args.no_pin and len(os.sched_getaffinity(0)) >= 2
    server_cpu, client_cpu = (0, 1) if pinned else (None, None)
    bindir = Path(sys.executable).parent
    webhook_cmd = shutil.which("resource-webhook", path=str(bindir)) or shutil.which(
        "resource-webhook"
    )
    if webhook_cmd is None:
        print("resource-webhook is not installed (pip install -e .)", file=sys.stderr)
        return 1
    go = None
    if not args.no_go:
        from bench.gobuild import build

        go = build(("webhook",))

    from webhook.admission import review
    from webhook.certs import write_certs
    from webhook.mutation import Mutator

    body = json.dumps(sample_review(), separators=(",", ":")).encode()  # compact, as Go writes it
    template = distinct_template()
    answer = review(body, Mutator()).body
    report = Report(
        command="python -m bench webhook " + " ".join(argv),
        client=client,
        concurrency=args.concurrency,
        rounds=args.rounds,
        seconds_per_round=args.seconds,
        rate=args.rate,
        pinned=pinned,
        same_pod=args.same_pod,
    )
    with tempfile.TemporaryDirectory(prefix="bench-webhook-") as tmp:
        work = Path(tmp)
        certs = write_certs("resource-webhook", "resource-enforcer", work / "certs")
        (work / "body.json").write_bytes(body)
        (work / "template.json").write_bytes(template)
        (work / "answer.json").write_bytes(answer)
        tls = ["--tls-cert", str(certs.tls_crt), "--tls-key", str(certs.tls_key)]
        commands = {
            "webhook": [webhook_cmd, "serve", *tls, "--host", "127.0.0.1", "--port", "0"],
            "bare": [
                sys.executable, "-m", "bench.webhook", "serve-bare", *tls,
                "--answer", str(work / "answer.json"),
            ],
        }  # fmt: skip
        if go is not None:
            commands["go"] = [str(go["webhook"]), *tls]
        servers = [
            start_server(name, cmd, work / f"{name}.log", server_cpu)
            for name, cmd in commands.items()
        ]
        ctx = ssl.create_default_context(cafile=str(certs.ca_crt))
        if args.same_pod:
            requests = [_request_bytes(body)]
        else:
            requests = [_request_bytes(distinct_body(template, n)) for n in range(1, 4001)]
        if client_cpu is not None:
            os.sched_setaffinity(0, {client_cpu})
        try:
            for server in servers:  # all answer, and are warm
                got = asyncio.run(_closed_loop(server.port, ctx, requests[0], 4, 1.0))
                if got[1]:
                    raise RuntimeError(f"{server.name} answered errors; see {server.log}")
            start = 10_000
            for _ in range(args.rounds):
                for server in servers:
                    lua = work / f"post-{start}.lua"
                    if args.same_pod:
                        lua.write_text(_WRK_LUA.format(body=work / "body.json"))
                    else:
                        lua.write_text(
                            _WRK_LUA_DISTINCT.replace("{template}", str(work / "template.json"))
                            .replace("{start}", str(start))
                            .replace("{uid}", UID_MARK)
                            .replace("{memory}", MEMORY_MARK)
                        )
                    start += 10_000_000  # pods never repeat, across rounds and servers
                    cpu0 = server.cpu_seconds()
                    if client == "wrk":
                        run = _wrk(server, lua, args.concurrency, args.seconds, client_cpu)
                    else:
                        lat, errors, elapsed = asyncio.run(
                            _closed_loop(
                                server.port, ctx, requests[0], args.concurrency, args.seconds
                            )
                        )
                        run = _summary(server.name, "python", lat, errors, elapsed)
                    used = server.cpu_seconds() - cpu0
                    run.cpu_us_per_request = round(used / max(run.requests, 1) * 1e6, 1)
                    report.closed_loop.append(run)
            for server in servers:
                lat, errors, elapsed = asyncio.run(
                    _open_loop(server.port, ctx, requests, args.rate, args.rate_seconds, 8)
                )
                report.open_loop.append(_summary(server.name, "python", lat, errors, elapsed))
            for server in servers:
                report.peak_rss_mib[server.name] = peak_rss_mib(server.process.pid)
        finally:
            for server in servers:
                server.stop()
    report.summary = _summarize(report)
    _print(report)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(asdict(report), indent=2) + "\n")
    print(f"\nwritten: {args.json}")
    errors = sum(r.errors for r in report.closed_loop + report.open_loop)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
