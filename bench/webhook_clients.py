"""The webhook benchmark's clients: a lean Python HTTPS client in closed and open loop, and
`wrk` (its script and its output), each run summed up as a `Run`."""

from __future__ import annotations

import asyncio
import re
import ssl
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from bench.webhook_servers import Server, pin_to


def request_bytes(body: bytes) -> bytes:
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


async def closed_loop(
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


async def open_loop(
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


def summary_of(
    server: str, client: str, latencies: list[float], errors: int, elapsed: float
) -> Run:
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


WRK_LUA = """wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = assert(io.open("{body}", "rb"))
wrk.body = f:read("*a")
f:close()
"""

# A distinct pod in every request, as bench.webhook_review.distinct_body makes them.
WRK_LUA_DISTINCT = """wrk.method = "POST"
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


def wrk_run(server: Server, lua: Path, concurrency: int, seconds: float, cpu: int | None) -> Run:
    cmd = [
        "wrk", "-t1", f"-c{concurrency}", f"-d{max(1, round(seconds))}s", "--latency",
        "-s", str(lua), f"https://127.0.0.1:{server.port}/mutate",
    ]  # fmt: skip
    output = subprocess.run(
        cmd,
        check=True,
        capture_output=True,
        text=True,
        preexec_fn=pin_to(cpu),
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
