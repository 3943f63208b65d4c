"""Attacks on the enforcer's CRI relay at the HTTP/2 level, against `resource-enforcer run`.

Each test starts its own enforcer (the console script, a private containerd behind it) and
attacks the relay socket with a hand-driven HTTP/2 peer (`tests/relay/h2peer.py`: frames by
hyperframe, header blocks by hpack, malformed frames raw), then reads the enforcer's memory
from /proc and checks that a normal client is still answered:

- an HPACK bomb (a small header block that references one large table entry again and again)
  from the client, and from the runtime's side (a hostile upstream);
- more concurrent streams than the relay announced;
- a client that sends calls and never reads the answers;
- PING, SETTINGS, RST_STREAM ("rapid reset") and CONTINUATION floods.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from hostile_support import peak_rss_mib, rss_mib

from enforcer.cri import api_pb2
from enforcer.relay.h2.framing import ErrorCode, Setting
from tests.relay import h2wire as fr
from tests.relay.h2peer import Peer, Server, grpc_message, request_headers
from tests.support.containerd import PrivateContainerd
from tests.support.enforcer_process import EnforcerProcess

VERSION = "/runtime.v1.RuntimeService/Version"
LIST_IMAGES = "/runtime.v1.ImageService/ListImages"
BIG = b"x" * 4000  # one dynamic-table entry of ~4 KiB, referenced by a one-byte index


@pytest.fixture
def enforcer(containerd: PrivateContainerd, tmp_path: Path) -> Iterator[EnforcerProcess]:
    """A fresh `resource-enforcer run` per test: each attack measures its own process."""
    proc = EnforcerProcess(
        tmp_path / "enforcer", runtime_socket=containerd.socket, extra_args=["--log-level", "info"]
    )
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def pid_of(enforcer: EnforcerProcess) -> int:
    assert enforcer.proc is not None
    return enforcer.proc.pid


def version_seconds(enforcer: EnforcerProcess) -> float:
    """How long a normal client's Version call through the relay takes (a new connection)."""
    start = time.monotonic()
    with grpc.insecure_channel(f"unix://{enforcer.relay_socket}") as channel:
        call = channel.unary_unary(VERSION)
        call(api_pb2.VersionRequest(version="v1").SerializeToString(), timeout=10)
    return time.monotonic() - start


def relay_settings(peer: Peer) -> dict[int, int]:
    first = peer.next_frame()
    assert first is not None and first[0] == fr.SETTINGS, first
    return dict(fr.parse_settings(first[3]))


def send_quietly(peer: Peer, data: bytes, timeout: float = 10.0) -> int:
    """Send what the relay will read of ``data`` within ``timeout`` (it may stop reading, or
    close); returns the bytes sent."""
    peer.sock.settimeout(timeout)
    sent = 0
    view = memoryview(data)
    try:
        while sent < len(data):
            sent += peer.sock.send(view[sent : sent + (1 << 16)])
    except (TimeoutError, OSError):
        pass
    return sent


def bomb_block(encoder_block: bytes, references: int) -> bytes:
    """``encoder_block`` (whose last field was just added to the peer's table, index 62), then
    ``references`` one-byte references to that field."""
    return encoder_block + b"\xbe" * references


def test_hpack_bomb_from_the_client(enforcer: EnforcerProcess, measured) -> None:
    pid = pid_of(enforcer)
    peer = Peer.client(enforcer.relay_socket)
    settings = relay_settings(peer)
    assert settings.get(Setting.MAX_HEADER_LIST_SIZE) == 64 << 10
    start_rss = rss_mib(pid)
    block = bomb_block(peer.block([*request_headers(VERSION), (b"x-bomb", BIG)]), 60_000)
    decoded_mib = 60_000 * (len(BIG) + 6 + 32) / (1 << 20)
    started = time.monotonic()
    # The relay may give up on the block before it has read all of it, and close.
    send_quietly(peer, fr.headers_frames(1, block, 16384, end=True))
    _, code, debug = peer.goaway(timeout=10)
    took = time.monotonic() - started
    grew = peak_rss_mib(pid) - start_rss
    peer.close()
    latency = version_seconds(enforcer)
    measured(
        f"HPACK bomb from a client: {len(block) >> 10} KiB block decoding to {decoded_mib:.0f} MiB",
        "GOAWAY COMPRESSION_ERROR < 5 s; peak RSS +16 MiB at most; others answered < 1 s",
        f"GOAWAY {ErrorCode(code).name} after {took * 1000:.0f} ms; peak RSS +{grew:.1f} MiB; "
        f"next call {latency * 1000:.0f} ms",
    )
    assert code == ErrorCode.COMPRESSION_ERROR, debug
    assert took < 5 and grew < 16 and latency < 1


def test_hpack_bomb_from_the_runtime(
    containerd: PrivateContainerd, tmp_path: Path, measured
) -> None:
    """The runtime's side is bounded too: a hostile upstream answers with a bomb."""
    goaways: list[int] = []
    upstream_settings: list[dict[int, int]] = []

    def hostile(peer: Peer) -> None:
        peer.send(fr.settings_frame({}))
        first = True
        while (f := peer.next_frame(timeout=20)) is not None:
            if f[0] == fr.SETTINGS and not f[1] & fr.FLAG_ACK and first:
                upstream_settings.append(dict(fr.parse_settings(f[3])))
                first = False
            elif f[0] == fr.HEADERS:
                headers = dict(peer.decode(f))
                if headers.get(b":path") == VERSION.encode():
                    status = [(b":status", b"200"), (b"content-type", b"application/grpc")]
                    block = bomb_block(peer.block([*status, (b"x-bomb", BIG)]), 60_000)
                    peer.send(fr.headers_frames(f[2], block, 16384, end=False))
                else:  # the enforcer's own reconciliation: refuse, quickly
                    peer.send(
                        fr.headers_frames(
                            f[2],
                            peer.block([(b":status", b"200"), (b"grpc-status", b"14")]),
                            16384,
                            end=True,
                        )
                    )
            elif f[0] == fr.GOAWAY:
                goaways.append(fr.parse_goaway(f[3])[1])
                return

    upstream_path = str(tmp_path / "hostile.sock")
    server = Server(upstream_path, hostile)
    proc = EnforcerProcess(
        tmp_path / "enforcer", runtime_socket=upstream_path, extra_args=["--log-level", "info"]
    )
    proc.start(wait=False)
    try:
        deadline = time.monotonic() + 20
        while not Path(proc.relay_socket).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        pid = pid_of(proc)
        start_rss = rss_mib(pid)
        started = time.monotonic()
        with (
            grpc.insecure_channel(f"unix://{proc.relay_socket}") as channel,
            pytest.raises(grpc.RpcError) as err,
        ):
            channel.unary_unary(VERSION)(b"", timeout=10)
        took = time.monotonic() - started
        grew = peak_rss_mib(pid) - start_rss
        deadline = time.monotonic() + 5
        while not goaways and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        proc.stop()
        server.close()
    measured(
        "HPACK bomb from the runtime's side (a hostile upstream's response headers)",
        "GOAWAY COMPRESSION_ERROR to it; the call fails < 5 s; peak RSS +16 MiB at most",
        f"GOAWAY {[ErrorCode(c).name for c in goaways]}; {err.value.code().name} after "
        f"{took * 1000:.0f} ms; peak RSS +{grew:.1f} MiB",
    )
    assert any(s.get(Setting.MAX_HEADER_LIST_SIZE) == 64 << 10 for s in upstream_settings)
    assert ErrorCode.COMPRESSION_ERROR in goaways
    assert err.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL)
    assert took < 5 and grew < 16


def test_more_streams_than_announced_are_refused(enforcer: EnforcerProcess, measured) -> None:
    pid = pid_of(enforcer)
    peer = Peer.client(enforcer.relay_socket)
    limit = relay_settings(peer).get(Setting.MAX_CONCURRENT_STREAMS)
    assert limit is not None and limit <= 1000
    start_rss = rss_mib(pid)
    # Calls that stay open: request headers, no message yet (containerd waits for it).
    rest = bytearray()
    for i in range(1, limit + 50):
        sid = 2 * i - 1
        rest += fr.headers_frames(sid, peer.block(request_headers(VERSION)), 16384, end=False)
    peer.send(bytes(rest))
    refused = []
    deadline = time.monotonic() + 20
    while len(refused) < 49 and time.monotonic() < deadline:
        f = peer.next_frame(timeout=max(0.1, deadline - time.monotonic()))
        if f is None:
            break
        if f[0] == fr.RST_STREAM and fr.parse_u32(f[3]) == ErrorCode.REFUSED_STREAM:
            refused.append(f[2])
    grew = rss_mib(pid) - start_rss
    latency = version_seconds(enforcer)
    peer.close()
    measured(
        f"{limit + 49} concurrent streams on one connection (announced limit {limit})",
        "every stream over the limit gets REFUSED_STREAM; RSS +64 MiB at most",
        f"{len(refused)} refused (first stream id {min(refused, default=0)}); RSS +{grew:.1f} MiB; "
        f"others answered in {latency * 1000:.0f} ms",
    )
    assert sorted(refused) == [2 * i - 1 for i in range(limit + 1, limit + 50)]
    assert grew < 64 and latency < 1


def test_a_client_that_never_reads(enforcer: EnforcerProcess, measured) -> None:
    """Calls are sent and their answers never read: the relay stops reading the client (and
    containerd's answers to it) once its socket does not drain, instead of buffering."""
    pid = pid_of(enforcer)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # keep the kernel's share small
    sock.connect(enforcer.relay_socket)
    peer = Peer(sock)
    # Windows as large as HTTP/2 allows: only the socket can hold the relay back.
    peer.send(
        fr.PREFACE,
        fr.settings_frame({Setting.INITIAL_WINDOW_SIZE: (1 << 31) - 1}),
        fr.window_update_frame(0, (1 << 31) - 1 - 65535),
    )
    # Each request padded to 2 KiB (a filter containerd does not match), so what the relay
    # would keep of the client's calls shows.
    request = api_pb2.ListImagesRequest(filter=api_pb2.ImageFilter(image=api_pb2.ImageSpec()))
    request.filter.image.image = "x" * 2000
    message = grpc_message(request.SerializeToString())
    calls = 20_000
    wire = bytearray()
    for i in range(calls):
        sid = 2 * i + 1
        wire += fr.headers_frames(sid, peer.block(request_headers(LIST_IMAGES)), 16384, False)
        wire += fr.data_frame(sid, message, end=True)
    start_rss = rss_mib(pid)
    started = time.monotonic()
    stop = threading.Event()
    peak = [start_rss]

    def watch() -> None:
        while not stop.wait(0.1):
            peak[0] = max(peak[0], rss_mib(pid))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    sent = send_quietly(peer, bytes(wire), timeout=5)
    latency = version_seconds(enforcer)  # another client, while this one still does not read
    time.sleep(1)
    stop.set()
    watcher.join()
    grew = peak[0] - start_rss
    # Now read: the relay takes up where it stopped.
    answered = 0
    while (f := peer.next_frame(timeout=3)) is not None:
        if f[0] == fr.HEADERS and f[1] & fr.FLAG_END_STREAM:
            answered += 1
    peer.close()
    measured(
        f"a client sends {calls} ListImages calls ({len(wire) >> 10} KiB) and never reads",
        "RSS +32 MiB at most; other clients answered < 1 s; answers flow once it reads",
        f"relay took {sent >> 10} KiB of it; RSS +{grew:.1f} MiB; "
        f"others answered in {latency * 1000:.0f} ms; {answered} answers read after",
    )
    assert grew < 32 and latency < 1 and answered > 0
    assert time.monotonic() - started < 60


@pytest.mark.parametrize(
    ("kind", "frame", "limit"),
    [
        ("PING", fr.ping_frame(b"hostile!"), 100),
        ("SETTINGS", fr.settings_frame({Setting.INITIAL_WINDOW_SIZE: 65535}), 100),
    ],
    ids=["ping", "settings"],
)
def test_control_frame_floods_get_goaway(
    enforcer: EnforcerProcess, measured, kind: str, frame: bytes, limit: int
) -> None:
    pid = pid_of(enforcer)
    peer = Peer.client(enforcer.relay_socket)
    relay_settings(peer)
    start_rss = rss_mib(pid)
    started = time.monotonic()
    flood = 100_000
    sent = send_quietly(peer, frame * flood, timeout=5)
    frames = peer.frames_until(lambda f: f[0] == fr.GOAWAY, timeout=10)
    took = time.monotonic() - started
    code = fr.parse_goaway(frames[-1][3])[1]
    acks = sum(
        1 for f in frames if f[0] == (fr.PING if kind == "PING" else fr.SETTINGS) and f[1] & 1
    )
    grew = peak_rss_mib(pid) - start_rss
    peer.close()
    latency = version_seconds(enforcer)
    measured(
        f"{kind} flood: {flood} frames, answers not read",
        f"GOAWAY ENHANCE_YOUR_CALM after {limit} at most; peak RSS +16 MiB at most",
        f"GOAWAY {ErrorCode(code).name} after {acks} answered ({sent // len(frame)} sent, "
        f"{took * 1000:.0f} ms); peak RSS +{grew:.1f} MiB; next call {latency * 1000:.0f} ms",
    )
    assert code == ErrorCode.ENHANCE_YOUR_CALM
    # The relay answers what it reads before the count is over (its own SETTINGS ACK aside).
    assert acks <= limit + 1 and grew < 16 and latency < 1


def test_rapid_reset_gets_goaway(enforcer: EnforcerProcess, measured) -> None:
    """Open a call and cancel it at once, thousands of times (CVE-2023-44487)."""
    pid = pid_of(enforcer)
    peer = Peer.client(enforcer.relay_socket)
    relay_settings(peer)
    message = grpc_message(api_pb2.VersionRequest(version="v1").SerializeToString())
    wire = bytearray()
    pairs = 10_000
    for i in range(pairs):
        sid = 2 * i + 1
        wire += fr.headers_frames(sid, peer.block(request_headers(VERSION)), 16384, False)
        wire += fr.data_frame(sid, message, end=True)
        wire += fr.rst_stream_frame(sid, ErrorCode.CANCEL)
    start_rss = rss_mib(pid)
    started = time.monotonic()
    send_quietly(peer, bytes(wire), timeout=5)
    frames = peer.frames_until(lambda f: f[0] == fr.GOAWAY, timeout=10)
    took = time.monotonic() - started
    last, code, _ = fr.parse_goaway(frames[-1][3])
    grew = peak_rss_mib(pid) - start_rss
    peer.close()
    latency = version_seconds(enforcer)
    measured(
        f"rapid reset: {pairs} calls opened and cancelled at once",
        "GOAWAY ENHANCE_YOUR_CALM after 200 resets with no call finished; RSS +16 MiB at most",
        f"GOAWAY {ErrorCode(code).name} at stream {last} of {2 * pairs - 1} "
        f"({took * 1000:.0f} ms); peak RSS +{grew:.1f} MiB; next call {latency * 1000:.0f} ms",
    )
    assert code == ErrorCode.ENHANCE_YOUR_CALM
    assert last < 2 * pairs - 1 and grew < 16 and latency < 1


def test_continuation_flood_gets_goaway(enforcer: EnforcerProcess, measured) -> None:
    """A header block that never ends: endless empty CONTINUATION frames (CVE-2024-27316)."""
    pid = pid_of(enforcer)
    peer = Peer.client(enforcer.relay_socket)
    relay_settings(peer)
    block = peer.block(request_headers(VERSION))
    flood = 200_000
    wire = fr.frame(fr.HEADERS, 0, 1, block) + fr.frame(fr.CONTINUATION, 0, 1) * flood
    start_rss = rss_mib(pid)
    started = time.monotonic()
    sent = send_quietly(peer, wire, timeout=5)
    _, code, debug = peer.goaway(timeout=10)
    took = time.monotonic() - started
    grew = peak_rss_mib(pid) - start_rss
    peer.close()
    latency = version_seconds(enforcer)
    measured(
        f"CONTINUATION flood: {flood} empty frames after one HEADERS",
        "GOAWAY ENHANCE_YOUR_CALM after 32 frames; peak RSS +16 MiB at most",
        f"GOAWAY {ErrorCode(code).name} ({min(sent, len(wire)) >> 10} KiB taken, "
        f"{took * 1000:.0f} ms); peak RSS +{grew:.1f} MiB; next call {latency * 1000:.0f} ms",
    )
    assert code == ErrorCode.ENHANCE_YOUR_CALM, debug
    assert grew < 16 and latency < 1


def test_connection_flood_is_capped(enforcer: EnforcerProcess, measured) -> None:
    """Connections that send a preface and then nothing: past the cap, closed as accepted."""
    pid = pid_of(enforcer)
    start_rss = rss_mib(pid)
    peers = []
    for _ in range(300):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(enforcer.relay_socket)
        # One past the cap may be closed before its preface is sent: closed at once, as meant.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(fr.PREFACE + fr.settings_frame({}))
        peers.append(Peer(sock))
    time.sleep(1)
    grew = rss_mib(pid) - start_rss
    open_ = sum(1 for p in peers if p.next_frame(timeout=2) is not None and not p.eof)
    for p in peers:
        p.close()
    time.sleep(0.5)
    latency = version_seconds(enforcer)
    measured(
        "300 idle HTTP/2 connections to the relay",
        "128 served at most, the rest closed at once; RSS +32 MiB at most",
        f"{open_} served, {300 - open_} closed; RSS +{grew:.1f} MiB; "
        f"next call after they left {latency * 1000:.0f} ms",
    )
    assert open_ <= 128 and grew < 32 and latency < 1
