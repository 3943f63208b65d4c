"""A server TLS context that follows certificate files replaced on disk.

cert-manager (or an operator re-running `resource-webhook certs`) renews the Secret; the kubelet
then swaps the mounted files under the running pod. Every new TLS handshake checks the files'
identity (device, inode, size, mtime; a few microseconds) and, when they changed, loads a fresh
context and hands it to that connection from the SNI callback, which OpenSSL runs for every
ClientHello (with or without an SNI name) before the certificate is chosen. Connections already
open keep their session. A pair that does not load (a half-written update, a key that does not
match the certificate) is not used: the previous pair keeps serving and the load is retried
on the next handshake.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("webhook.tls")

_Identity = tuple[int, int, int, int]


def _identity(path: Path) -> _Identity:
    st = os.stat(path)  # follows symlinks: the kubelet swaps a `..data` symlink
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def server_context(cert: str | Path, key: str | Path) -> ssl.SSLContext:
    """A server context that speaks TLS 1.2 and 1.3 only."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE
    # Forward-secret AEAD suites only for TLS 1.2 (TLS 1.3's suites are all of that kind).
    ctx.set_ciphers("ECDHE+AESGCM:ECDHE+CHACHA20")
    ctx.load_cert_chain(str(cert), str(key))
    return ctx


@dataclass(frozen=True)
class ReloadEvent:
    ok: bool
    error: str | None = None


class ReloadingTLS:
    """Owns the context given to the server; `context` stays the same object for its life."""

    def __init__(
        self,
        cert: str | Path,
        key: str | Path,
        *,
        on_reload: Callable[[ReloadEvent], None] | None = None,
    ) -> None:
        self.cert = Path(cert)
        self.key = Path(key)
        self._on_reload = on_reload
        self._lock = threading.Lock()
        # Raises here, at start-up, when the files are missing or do not match.
        self._stamp = self._stamps()
        self.context = server_context(self.cert, self.key)
        self.context.sni_callback = self._sni
        self._current = self.context
        self._failed_stamp: tuple[_Identity, _Identity] | None = None

    def _stamps(self) -> tuple[_Identity, _Identity]:
        return (_identity(self.cert), _identity(self.key))

    def current(self) -> ssl.SSLContext:
        """The context for a new connection: the newest pair that loaded."""
        try:
            stamp = self._stamps()
        except OSError:
            # Mid-swap (a file briefly missing): keep serving with what we have.
            return self._current
        if stamp == self._stamp or stamp == self._failed_stamp:
            return self._current
        with self._lock:
            if stamp != self._stamp:
                self._load(stamp)
        return self._current

    def _load(self, stamp: tuple[_Identity, _Identity]) -> None:
        try:
            fresh = server_context(self.cert, self.key)
        except (OSError, ssl.SSLError, ValueError) as exc:
            # Remember the failure so a broken pair costs one load, not one per handshake.
            self._failed_stamp = stamp
            log.warning(
                "certificate reload failed; still serving the previous certificate",
                extra={"fields": {"cert": str(self.cert), "key": str(self.key), "error": str(exc)}},
            )
            self._notify(ReloadEvent(False, str(exc)))
            return
        self._current = fresh
        self._stamp = stamp
        self._failed_stamp = None
        log.info("certificate reloaded", extra={"fields": {"cert": str(self.cert)}})
        self._notify(ReloadEvent(True))

    def _notify(self, event: ReloadEvent) -> None:
        if self._on_reload is not None:
            self._on_reload(event)

    def _sni(self, sslobj: ssl.SSLObject, server_name: str | None, ctx: ssl.SSLContext) -> None:
        try:
            current = self.current()
            if current is not ctx:
                sslobj.context = current
        except Exception:  # never fail a handshake over reloading: keep the old pair
            log.exception("certificate reload check failed")
        return None
