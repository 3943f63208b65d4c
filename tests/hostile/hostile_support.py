"""Tools of the hostile-peer suite: a process's memory from /proc, large reviews, stalled peers."""

from __future__ import annotations

import json
import re
import selectors
import socket
import ssl
import time
from typing import Any

from tests.webhook.wh_support import container, pod, review

MiB = 1024 * 1024


def memory_kib(pid: int, field: str) -> int:
    """A field of /proc/PID/status in KiB: VmRSS (now) or VmHWM (the peak so far)."""
    with open(f"/proc/{pid}/status") as f:
        match = re.search(rf"^{field}:\s+(\d+) kB", f.read(), re.MULTILINE)
    assert match, f"no {field} in /proc/{pid}/status"
    return int(match.group(1))


def rss_mib(pid: int) -> float:
    return memory_kib(pid, "VmRSS") / 1024


def peak_rss_mib(pid: int) -> float:
    return memory_kib(pid, "VmHWM") / 1024


def deployment_memory_limit_mib(manifest: str) -> float:
    """The webhook container's memory limit in deploy/webhook/deployment.yaml, in MiB."""
    import yaml

    with open(manifest) as f:
        spec = yaml.safe_load(f)["spec"]["template"]["spec"]
    limit = spec["containers"][0]["resources"]["limits"]["memory"]
    match = re.fullmatch(r"(\d+)(Mi|Gi)", limit)
    assert match, f"unexpected memory limit {limit!r}"
    return int(match.group(1)) * (1024 if match.group(2) == "Gi" else 1)


def large_review(seed: int, containers: int, pad: int = 0) -> bytes:
    """An AdmissionReview of a pod with `containers` containers, distinct for every `seed`
    (names and quantities), each container carrying `pad` bytes of environment."""
    env = [{"name": "PAD", "value": "x" * pad}] if pad else None
    cs: list[dict[str, Any]] = []
    for j in range(containers):
        extra = {"env": env} if env else {}
        cs.append(
            container(
                f"s{seed}-c{j}",
                {"cpu": f"{(seed * 7 + j) % 900 + 100}m", "memory": f"{j % 512 + 64}Mi"},
                {"cpu": "2", "memory": "1Gi"},
                **extra,
            )
        )
    return json.dumps(review(pod(cs, name=f"wide-{seed}"), uid=f"wide-{seed}")).encode()


def small_review(seed: int) -> bytes:
    p = pod([container("app", {"cpu": "250m", "memory": "64Mi"}, {"cpu": "1"})], name=f"s{seed}")
    return json.dumps(review(p, uid=f"small-{seed}")).encode()


def stalled_tls(port: int, ctx: ssl.SSLContext, partial: bytes) -> ssl.SSLSocket:
    """A TLS connection that sent `partial` (half a request) and will send nothing more."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock = ctx.wrap_socket(raw, server_hostname="localhost")
    sock.sendall(partial)
    return sock


def wait_all_closed(socks: list[socket.socket], timeout: float) -> float | None:
    """Seconds until the server had closed every socket (end of file or reset); None if some
    were still open after `timeout`. Closed sockets are closed here too."""
    start = time.monotonic()
    open_ = set(socks)
    with selectors.DefaultSelector() as sel:
        for s in open_:
            sel.register(s, selectors.EVENT_READ)
        while open_:
            left = timeout - (time.monotonic() - start)
            if left <= 0:
                return None
            for key, _ in sel.select(min(left, 1.0)):
                s = key.fileobj
                assert isinstance(s, socket.socket)
                try:
                    s.setblocking(False)
                    data = s.recv(4096)
                except (ssl.SSLWantReadError, BlockingIOError):
                    continue
                except OSError:
                    data = b""  # reset, or a TLS stream cut short: closed either way
                if data:
                    continue  # an answer would do too, as long as it then closes
                sel.unregister(s)
                open_.discard(s)
                s.close()
    return time.monotonic() - start
