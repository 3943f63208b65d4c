"""Attacks on the enforcer's metrics endpoint, through the real console script and sockets.

- Label flood: 300 made-up gRPC method names sent through the relay must not become 300 label
  values (each a new series kept for ever): names come from the CRI's own list, the rest is
  `other`.
- Connection flood: 200 connections that send half a request and stall must not cost a
  thread each, and are closed after a few seconds.
- Only GET and HEAD are served.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from hostile_support import wait_all_closed

from enforcer.metrics import CRI_METHODS
from tests.support.containerd import PrivateContainerd
from tests.support.enforcer_process import EnforcerProcess, free_port


@pytest.fixture(scope="module")
def enforcer(
    containerd: PrivateContainerd, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EnforcerProcess]:
    proc = EnforcerProcess(
        tmp_path_factory.mktemp("metrics"),
        runtime_socket=containerd.socket,
        metrics_address=f"127.0.0.1:{free_port()}",
    )
    proc.start()
    try:
        yield proc
    finally:
        assert proc.stop() == 0, proc.log_tail()


def fetch(url: str, method: str = "GET") -> tuple[int, bytes, dict[str, str]]:
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status, resp.read(), dict(resp.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), dict(exc.headers)


def method_labels(text: str) -> dict[str, float]:
    """method label -> calls counted, summed over codes."""
    out: dict[str, float] = {}
    for m in re.finditer(r"^resource_enforcer_cri_calls_total\{(.*)\} (\S+)$", text, re.M):
        method = re.search(r'method="([^"]*)"', m.group(1))
        assert method
        out[method.group(1)] = out.get(method.group(1), 0) + float(m.group(2))
    return out


def threads(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        match = re.search(r"^Threads:\s+(\d+)", f.read(), re.M)
    assert match
    return int(match.group(1))


def test_made_up_method_names_make_no_new_label_values(enforcer: EnforcerProcess, measured) -> None:
    with grpc.insecure_channel(f"unix://{enforcer.relay_socket}") as channel:
        for i in range(300):
            service = "runtime.v1.RuntimeService" if i % 2 else f"evil.v{i}.Service"
            call = channel.unary_unary(f"/{service}/MadeUp{i}")
            with pytest.raises(grpc.RpcError) as err:
                call(b"", timeout=10)
            assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED  # containerd's answer
    labels = method_labels(fetch(enforcer.metrics_url + "/metrics")[1].decode())
    measured(
        "300 made-up gRPC method names through the relay",
        f"method label values <= {len(CRI_METHODS) + 1} (the CRI's methods and other)",
        f"{len(labels)} label values; other = {labels.get('other', 0):.0f}",
    )
    assert labels.get("other", 0) >= 300
    assert set(labels) <= {*CRI_METHODS.values(), "other"}


def test_only_get_and_head_are_served(enforcer: EnforcerProcess) -> None:
    for method in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS", "BREW"):
        status, _, headers = fetch(enforcer.metrics_url + "/metrics", method)
        assert status == 405, method
        assert headers.get("Allow") == "GET, HEAD"
    status, body, headers = fetch(enforcer.metrics_url + "/metrics", "HEAD")
    assert status == 200 and body == b"" and int(headers["Content-Length"]) > 0
    assert fetch(enforcer.metrics_url + "/healthz")[:2] == (200, b"ok\n")
    assert fetch(enforcer.metrics_url + "/nothing")[0] == 404


def test_stalled_connections_cost_no_threads_and_are_closed(
    enforcer: EnforcerProcess, measured
) -> None:
    assert enforcer.proc is not None
    pid = enforcer.proc.pid
    before = threads(pid)
    host, port = enforcer.metrics_address.rsplit(":", 1)  # type: ignore[union-attr]
    stalled = []
    started = time.monotonic()
    for _ in range(200):
        s = socket.create_connection((host, int(port)), timeout=10)
        # Past the server's connection cap one is closed as accepted, maybe before this is
        # sent: closed at once, as meant (and counted closed below).
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        stalled.append(s)
    time.sleep(1)
    during = threads(pid)
    closed_after = wait_all_closed(stalled, timeout=30)
    for s in stalled:
        s.close()
    assert fetch(enforcer.metrics_url + "/metrics")[0] == 200
    measured(
        "200 stalled connections to the enforcer's metrics port",
        "threads +4 at most; all closed < 30 s",
        f"threads {before} -> {during}; all closed "
        + (
            f"after {time.monotonic() - started:.1f} s"
            if closed_after is not None
            else "NOT after 30 s"
        ),
    )
    assert during - before <= 4
    assert closed_after is not None


def test_metrics_address_from_the_configuration_and_health_follows_reconciliation(
    containerd: PrivateContainerd, tmp_path: Path, measured
) -> None:
    port = free_port()
    config = tmp_path / "config.yaml"
    config.write_text(f'metrics: {{address: "127.0.0.1:{port}"}}\n')
    runtime = tmp_path / "runtime.sock"  # nothing there yet: reconciliation fails
    proc = EnforcerProcess(
        tmp_path / "e", runtime_socket=str(runtime), config=str(config), metrics_address=None
    )
    proc.start(wait=False)
    try:
        url = f"http://127.0.0.1:{port}/healthz"
        deadline = time.monotonic() + 20
        answer: tuple[int, bytes, dict[str, str]] | None = None
        while time.monotonic() < deadline:
            try:
                answer = fetch(url)
                if answer[0] == 503:
                    break
            except OSError:
                pass
            time.sleep(0.2)
        assert answer is not None and answer[0] == 503, proc.log_tail()
        assert b"reconciliation" in answer[1]
        os.symlink(containerd.socket, runtime)  # the runtime comes up
        started = time.monotonic()
        while fetch(url)[0] != 200:
            assert time.monotonic() - started < 20, proc.log_tail()
            time.sleep(0.2)
        measured(
            "/healthz while the runtime cannot be reached",
            "503 until reconciled; ok after",
            f"503, then ok {time.monotonic() - started:.1f} s after the runtime came",
        )
    finally:
        assert proc.stop() == 0, proc.log_tail()
    # The flag wins over the configuration.
    flag_port = free_port()
    proc = EnforcerProcess(
        tmp_path / "f",
        runtime_socket=containerd.socket,
        config=str(config),
        metrics_address=f"127.0.0.1:{flag_port}",
    ).start()
    try:
        assert fetch(f"http://127.0.0.1:{flag_port}/healthz")[0] == 200
        with pytest.raises(OSError):
            fetch(f"http://127.0.0.1:{port}/healthz")
    finally:
        assert proc.stop() == 0, proc.log_tail()
