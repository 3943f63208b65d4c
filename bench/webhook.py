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
import shutil
import ssl
import statistics
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.webhook_clients import (
    WRK_LUA,
    WRK_LUA_DISTINCT,
    Run,
    closed_loop,
    open_loop,
    request_bytes,
    summary_of,
    wrk_run,
)
from bench.webhook_review import (
    MEMORY_MARK,
    UID_MARK,
    distinct_body,
    distinct_template,
    sample_review,
)
from bench.webhook_servers import peak_rss_mib, serve_bare, start_server

RESULTS = Path(__file__).resolve().parent / "results"


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
            requests = [request_bytes(body)]
        else:
            requests = [request_bytes(distinct_body(template, n)) for n in range(1, 4001)]
        if client_cpu is not None:
            os.sched_setaffinity(0, {client_cpu})
        try:
            for server in servers:  # all answer, and are warm
                got = asyncio.run(closed_loop(server.port, ctx, requests[0], 4, 1.0))
                if got[1]:
                    raise RuntimeError(f"{server.name} answered errors; see {server.log}")
            start = 10_000
            for _ in range(args.rounds):
                for server in servers:
                    lua = work / f"post-{start}.lua"
                    if args.same_pod:
                        lua.write_text(WRK_LUA.format(body=work / "body.json"))
                    else:
                        lua.write_text(
                            WRK_LUA_DISTINCT.replace("{template}", str(work / "template.json"))
                            .replace("{start}", str(start))
                            .replace("{uid}", UID_MARK)
                            .replace("{memory}", MEMORY_MARK)
                        )
                    start += 10_000_000  # pods never repeat, across rounds and servers
                    cpu0 = server.cpu_seconds()
                    if client == "wrk":
                        run = wrk_run(server, lua, args.concurrency, args.seconds, client_cpu)
                    else:
                        lat, errors, elapsed = asyncio.run(
                            closed_loop(
                                server.port, ctx, requests[0], args.concurrency, args.seconds
                            )
                        )
                        run = summary_of(server.name, "python", lat, errors, elapsed)
                    used = server.cpu_seconds() - cpu0
                    run.cpu_us_per_request = round(used / max(run.requests, 1) * 1e6, 1)
                    report.closed_loop.append(run)
            for server in servers:
                lat, errors, elapsed = asyncio.run(
                    open_loop(server.port, ctx, requests, args.rate, args.rate_seconds, 8)
                )
                report.open_loop.append(summary_of(server.name, "python", lat, errors, elapsed))
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
