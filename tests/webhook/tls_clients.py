"""HTTPS clients of the webhook tests: a review posted with curl or httpx, and a metric's value
read from the exposition text."""

from __future__ import annotations

import json
import os
import shutil
import ssl
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from wh_support import WebhookServer, body

CURL = shutil.which("curl")

Poster = Callable[[WebhookServer, Path, dict[str, Any], str], tuple[int, dict[str, Any]]]


def curl_post(
    server: WebhookServer, ca: Path, r: dict[str, Any], path: str = "/mutate"
) -> tuple[int, dict]:
    assert CURL, "curl is needed for these tests (apt-get install curl)"
    data = Path(server.log_path.parent) / f"body-{os.getpid()}.json"
    data.write_bytes(body(r))
    out = subprocess.run(
        [CURL, "-sS", "--cacert", str(ca), "-H", "Content-Type: application/json",
         "--data-binary", f"@{data}", "-w", "\n%{http_code}", f"{server.url}{path}"],
        capture_output=True, text=True, check=True, timeout=30,
    )  # fmt: skip
    text, status = out.stdout.rsplit("\n", 1)
    return int(status), json.loads(text)


def httpx_post(
    server: WebhookServer, ca: Path, r: dict[str, Any], path: str = "/mutate"
) -> tuple[int, dict]:
    ctx = ssl.create_default_context(cafile=str(ca))
    resp = httpx.post(f"{server.url}{path}", content=body(r), verify=ctx, timeout=10,
                      headers={"Content-Type": "application/json"})  # fmt: skip
    return resp.status_code, resp.json()


POSTERS = {"curl": curl_post, "httpx": httpx_post}


def metric_value(text: str, series: str) -> float:
    """The value of the series `series` (name and labels, exactly) in `text`."""
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{series} missing")
