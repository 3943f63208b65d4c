"""A container registry on loopback, for runtimes that must pull (critest, CRI-O).

``LocalRegistry`` runs Debian's ``docker-registry`` (distribution 2.8) on ``127.0.0.1:PORT`` over
plain HTTP with its storage in a temporary folder; ``push`` copies an OCI image archive into it
with ``skopeo``, under the image's own path (``registry.k8s.io/e2e-test-images/busybox:1.29-2``
is served as ``127.0.0.1:PORT/e2e-test-images/busybox:1.29-2``), so that a runtime whose registry
configuration mirrors the upstream hosts to this one pulls the upstream names unchanged.
``containerd_hosts`` writes containerd's ``hosts.toml`` folders for that; ``registries_conf`` the
same for CRI-O (containers-registries.conf).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

# The hosts critest's images name; each is mirrored to the loopback registry.
UPSTREAMS = ("registry.k8s.io", "gcr.io", "k8s.gcr.io", "docker.io", "quay.io")


def registry_available() -> str | None:
    """None when a loopback registry can run here, else why not."""
    missing = [p for p in ("docker-registry", "skopeo") if shutil.which(p) is None]
    if missing:
        return (
            f"missing {', '.join(missing)}; on Debian/Ubuntu `apt-get install "
            "docker-registry skopeo` (as root; make system-deps does)"
        )
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def image_path(name: str) -> str:
    """``host/path:tag`` -> ``path:tag`` (the repository without its registry host)."""
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return rest
    return name


class LocalRegistry:
    """docker-registry on 127.0.0.1, its storage in a temporary folder; a context manager."""

    def __init__(self, workdir: str | os.PathLike[str] | None = None) -> None:
        self._own = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="kre-registry-"))
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> LocalRegistry:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def start(self, timeout: float = 30.0) -> None:
        reason = registry_available()
        if reason:
            raise RuntimeError(reason)
        self.port = _free_port()
        config = self.workdir / "config.yml"
        (self.workdir / "storage").mkdir(parents=True, exist_ok=True)
        config.write_text(
            "version: 0.1\n"
            "log: {level: warn}\n"
            f"storage: {{filesystem: {{rootdirectory: {self.workdir / 'storage'}}}, "
            "delete: {enabled: true}}\n"
            f"http: {{addr: {self.address}}}\n"
        )
        log = open(self.workdir / "registry.log", "ab")  # noqa: SIM115 - the daemon's lifetime
        self._proc = subprocess.Popen(
            ["docker-registry", "serve", str(config)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while True:
            if self._proc.poll() is not None:
                raise RuntimeError(f"docker-registry exited: {self.log_tail()}")
            try:
                with urllib.request.urlopen(f"http://{self.address}/v2/", timeout=2):
                    return
            except (urllib.error.URLError, OSError):
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"docker-registry did not answer on {self.address}: {self.log_tail()}"
                    ) from None
                time.sleep(0.1)

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = (self.workdir / "registry.log").read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def push(self, archive: str | os.PathLike[str], name: str, timeout: float = 120) -> None:
        """Copy an OCI image archive into the registry as ``name`` (its host dropped)."""
        dest = f"docker://{self.address}/{image_path(name)}"
        cmd = [
            "skopeo",
            "copy",
            "--quiet",
            "--dest-tls-verify=false",
            "--insecure-policy",
            f"oci-archive:{os.fspath(archive)}",
            dest,
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed: {done.stderr.strip()}")

    def containerd_hosts(self, folder: str | os.PathLike[str]) -> Path:
        """containerd's ``config_path`` folder: every upstream host mirrored to this registry
        over plain HTTP (``hosts.toml`` per host)."""
        root = Path(folder)
        for host in UPSTREAMS:
            d = root / host
            d.mkdir(parents=True, exist_ok=True)
            (d / "hosts.toml").write_text(
                f'server = "https://{host}"\n\n'
                f'[host."http://{self.address}"]\n'
                '  capabilities = ["pull", "resolve"]\n'
                "  skip_verify = true\n"
            )
        return root

    def registries_conf(self, path: str | os.PathLike[str]) -> Path:
        """containers-registries.conf (CRI-O): every upstream host mirrored to this registry."""
        lines = ["unqualified-search-registries = []", 'short-name-mode = "disabled"', ""]
        for host in UPSTREAMS:
            lines += [
                "[[registry]]",
                f'prefix = "{host}"',
                f'location = "{self.address}"',
                "insecure = true",
                "",
            ]
        out = Path(path)
        out.write_text("\n".join(lines))
        return out

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 15)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, 9)
                proc.wait(10)
        if self._own:
            shutil.rmtree(self.workdir, ignore_errors=True)
