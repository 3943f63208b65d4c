"""The relay benchmark's floor, `bench/pipe.py`: bytes both ways, unchanged, within its bound."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.relay import ratio_summary

ROOT = Path(__file__).resolve().parents[2]  # the repository root, where bench/ is


def _echo(listener: socket.socket, stop: threading.Event) -> None:
    """Echoes each connection's bytes back, slowly at first (the pipe must buffer, then
    hold back), until the peer closes."""
    while not stop.is_set():
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        with conn:
            time.sleep(0.3)
            while chunk := conn.recv(65536):
                conn.sendall(chunk)


def _start_pipe(listen: str, backend: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.pipe", "--listen", listen, "--backend", backend],
        cwd=ROOT,
    )
    deadline = time.monotonic() + 20
    while not os.path.exists(listen):
        assert proc.poll() is None, "the pipe exited before serving"
        assert time.monotonic() < deadline, "the pipe did not serve its socket"
        time.sleep(0.05)
    return proc


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    assert proc.wait(10) == 0


@pytest.fixture
def pipe(tmp_path: Path) -> Iterator[tuple[str, str]]:
    backend = str(tmp_path / "backend.sock")
    listen = str(tmp_path / "pipe.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(backend)
    listener.listen(4)
    stop = threading.Event()
    echo = threading.Thread(target=_echo, args=(listener, stop), daemon=True)
    echo.start()
    proc = _start_pipe(listen, backend)
    try:
        yield listen, backend
    finally:
        _stop(proc)
        stop.set()
        listener.close()


def _exchange(listen: str, payload: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.settimeout(20)
        client.connect(listen)
        # At once: the first bytes usually come before the pipe has its backend connection
        # (a pipe that dropped them failed this test in 3 runs of 3).
        first = payload[:65536]
        client.sendall(first)
        received = bytearray()

        def read() -> None:
            while len(received) < len(payload):
                chunk = client.recv(65536)
                if not chunk:
                    return
                received.extend(chunk)

        reader = threading.Thread(target=read)
        reader.start()
        client.sendall(payload[len(first) :])  # much of it before the backend answers
        reader.join(30)
        return bytes(received)


def test_bytes_cross_both_ways_unchanged(pipe: tuple[str, str]) -> None:
    listen, _ = pipe
    payload = os.urandom(3 * 1024 * 1024)  # far over the pipe's 256 KiB high-water mark
    assert _exchange(listen, payload) == payload
    assert _exchange(listen, b"second connection") == b"second connection"


def test_a_backend_that_does_not_read_stops_the_pipe_reading(tmp_path: Path) -> None:
    backend, listen = str(tmp_path / "backend.sock"), str(tmp_path / "pipe.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(backend)
        listener.listen(1)
        proc = _start_pipe(listen, backend)
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
                client.connect(listen)
                peer, _ = listener.accept()  # accepted, never read
                client.setblocking(False)
                chunk, sent, stalled = b"x" * 65536, 0, time.monotonic()
                while sent < 64 * 1024 * 1024 and time.monotonic() - stalled < 2:
                    try:
                        sent += client.send(chunk)
                        stalled = time.monotonic()
                    except BlockingIOError:
                        time.sleep(0.01)
                peer.close()
        finally:
            _stop(proc)
    # The kernel's socket buffers on both sides, plus the pipe's 256 KiB high-water mark and
    # one read: a pipe that kept reading would have taken all 64 MiB.
    assert sent < 8 * 1024 * 1024, f"{sent} bytes taken in with nobody reading"


def test_a_backend_that_is_gone_closes_the_client(pipe: tuple[str, str]) -> None:
    listen, backend = pipe
    os.unlink(backend)  # nothing to connect to
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.settimeout(10)
        client.connect(listen)
        # The pipe may close before the bytes are sent, or after: either way it closes.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            client.sendall(b"hello")
        assert closed_by_peer(client)


def closed_by_peer(sock: socket.socket) -> bool:
    """Whether the peer closed `sock` (end of file, or a reset when it closed with our bytes
    unread) rather than answering or leaving it open (a timeout raises)."""
    try:
        return sock.recv(10) == b""
    except ConnectionResetError:
        return True


def test_the_summary_puts_each_side_beside_the_floor() -> None:
    lines = ratio_summary(
        {
            "Version x1 deadline 2m": {
                "direct_p50_us": 72,
                "relay_p50_ratio": 2.66,
                "Go byte pipe_p50_ratio": 1.74,
                "Python byte pipe_p50_ratio": 1.6,
            }
        }
    )
    assert "<= 1.6" in lines[0]
    assert lines[1].split() == [
        "Version", "x1", "deadline", "2m", "relay", "2.66", "Go", "byte", "pipe", "1.74",
        "Python", "byte", "pipe", "1.6",
    ]  # fmt: skip
