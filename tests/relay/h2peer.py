"""A hand-driven HTTP/2 peer for frame-level relay tests (blocking sockets, explicit frames)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable

from hpack import Decoder, Encoder

from tests.relay import h2wire as fr

Frame = fr.Wire


def grpc_message(payload: bytes) -> bytes:
    return b"\x00" + len(payload).to_bytes(4, "big") + payload


def request_headers(path: str) -> list[tuple[bytes, bytes]]:
    return [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", path.encode()),
        (b":authority", b"localhost"),
        (b"content-type", b"application/grpc"),
        (b"te", b"trailers"),
    ]


class Peer:
    """One HTTP/2 connection driven frame by frame."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.sock.settimeout(5)
        self.reader = fr.FrameReader(max_frame_size=fr.MAX_FRAME_LIMIT)
        self.encoder = Encoder()
        self.decoder = Decoder()
        self.pending: list[Frame] = []
        self.eof = False

    @classmethod
    def client(cls, path: str, settings: dict[int, int] | None = None) -> Peer:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
        peer = cls(sock)
        peer.send(fr.PREFACE, fr.settings_frame(settings or {}))
        return peer

    def close(self) -> None:
        self.sock.close()

    def send(self, *data: bytes) -> None:
        self.sock.sendall(b"".join(data))

    def headers(
        self,
        sid: int,
        headers: list[tuple[bytes, bytes]],
        end: bool = False,
        max_frame: int = 16384,
    ) -> None:
        self.send(fr.headers_frames(sid, self.encoder.encode(headers), max_frame, end))

    def block(self, headers: list[tuple[bytes, bytes]]) -> bytes:
        """An HPACK block of ``headers`` in this connection's encoding context."""
        return self.encoder.encode(headers)

    def data(self, sid: int, payload: bytes, end: bool = False) -> None:
        self.send(fr.data_frame(sid, payload, end))

    def data_chunked(self, sid: int, payload: bytes, end: bool = False, size: int = 16384) -> None:
        """``payload`` as DATA frames of at most ``size`` bytes."""
        chunks = [payload[i : i + size] for i in range(0, len(payload), size)] or [b""]
        for i, chunk in enumerate(chunks):
            self.data(sid, chunk, end=end and i == len(chunks) - 1)

    def _fill(self, deadline: float) -> bool:
        while not self.pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.eof:
                return False
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(1 << 20)
            except TimeoutError:
                return False
            except OSError:
                chunk = b""
            if not chunk:
                self.eof = True
                return False
            self.pending.extend(self.reader.feed(chunk))
        return True

    def next_frame(self, timeout: float = 5.0) -> Frame | None:
        """The next frame, or None on timeout/EOF; SETTINGS are ACKed, header blocks decoded
        into ``self.blocks``."""
        if not self._fill(time.monotonic() + timeout):
            return None
        f = self.pending.pop(0)
        if f[0] == fr.SETTINGS and not f[1] & fr.FLAG_ACK:
            with contextlib.suppress(OSError):  # the other side may be gone already
                self.send(fr.settings_frame(ack=True))
        return f

    def frames_until(self, pred: Callable[[Frame], bool], timeout: float = 5.0) -> list[Frame]:
        """Frames up to and including the first matching ``pred`` (AssertionError if none)."""
        out: list[Frame] = []
        deadline = time.monotonic() + timeout
        while True:
            f = self.next_frame(max(0.0, deadline - time.monotonic()))
            if f is None:
                raise AssertionError(f"no matching frame; got {[x[:3] for x in out]}")
            out.append(f)
            if pred(f):
                return out

    def quiet_frames(self, quiet: float = 0.3) -> list[Frame]:
        """Frames until nothing arrives for ``quiet`` seconds."""
        out = []
        while (f := self.next_frame(quiet)) is not None:
            out.append(f)
        return out

    def goaway(self, timeout: float = 5.0) -> tuple[int, int, bytes]:
        f = self.frames_until(lambda f: f[0] == fr.GOAWAY, timeout)[-1]
        return fr.parse_goaway(f[3])

    def decode(self, f: Frame) -> list[tuple[bytes, bytes]]:
        return [(n, v) for n, v in self.decoder.decode(fr.header_fragment(f[1], f[3]), raw=True)]


class Server:
    """A listening unix socket whose connections are handed to ``handler(peer)`` in threads."""

    def __init__(self, path: str, handler: Callable[[Peer], None]) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen()
        self.handler = handler
        self.accepted = 0
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self._run, args=(conn,), daemon=True).start()

    def _run(self, conn: socket.socket) -> None:
        peer = Peer(conn)
        try:
            preface = b""
            while len(preface) < len(fr.PREFACE):
                preface += conn.recv(len(fr.PREFACE) - len(preface))
            assert preface == fr.PREFACE
            self.handler(peer)
        except BaseException as exc:  # reported by the test through .errors
            self.errors.append(exc)
        finally:
            conn.close()

    def close(self) -> None:
        self.sock.close()


def data_of(frames: list[fr.Wire], sid: int) -> bytes:
    """The DATA payload of stream `sid` in `frames`, joined."""
    return b"".join(f[3] for f in frames if f[0] == fr.DATA and f[2] == sid)
