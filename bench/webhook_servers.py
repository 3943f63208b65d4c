"""The webhook benchmark's servers: the bare ASGI app the webhook is measured against, and
starting, pinning, timing and stopping a server process."""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


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


def pin_to(cpu: int | None) -> Any:
    if cpu is None:
        return None
    return lambda: os.sched_setaffinity(0, {cpu})


def start_server(name: str, cmd: list[str], log: Path, cpu: int | None) -> Server:
    out = log.open("wb")
    process = subprocess.Popen(cmd, stdout=out, stderr=out, preexec_fn=pin_to(cpu))
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


def peak_rss_mib(pid: int) -> float | None:
    """VmHWM: the most resident memory the process has had."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None
