"""A private containerd 1.7 with NRI on, beside the system's containerd 1.6.

``.ci/containerd17.sh`` extracts Debian trixie's containerd package (1.7.24, NRI API v0.6.1)
under ``/var/cache/kube-resource-enforcer/containerd-1.7`` (``KRE_CONTAINERD17_ROOT`` moves it);
``NriContainerd`` runs that containerd the way ``PrivateContainerd`` runs the system's one (its
own root, state, sockets and runc root in a temporary folder), with bookworm's runc, and its NRI
plugin on: the NRI socket is ``<workdir>/nri.sock``, plugins get 5 s to register and 2 s per
request, as containerd's defaults (FACTS.md).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from pathlib import Path

from tests.support import images
from tests.support.containerd import (
    ContainerdError,
    PrivateContainerd,
    _toml_str,
    render_config,
)

DEFAULT_ROOT = "/var/cache/kube-resource-enforcer/containerd-1.7"
_PROGRAMS = ("containerd", "ctr", "containerd-shim-runc-v2")


def containerd17_bin_dir() -> Path:
    """Where the extracted containerd 1.7 programs are."""
    return Path(os.environ.get("KRE_CONTAINERD17_ROOT", DEFAULT_ROOT)) / "root" / "usr" / "bin"


def containerd17_available() -> str | None:
    """None when a private containerd 1.7 can run here, else the reason why not."""
    bin_dir = containerd17_bin_dir()
    missing = [p for p in _PROGRAMS if not os.access(bin_dir / p, os.X_OK)]
    if missing:
        return (
            f"no containerd 1.7 under {bin_dir} (missing {', '.join(missing)}); "
            "run .ci/containerd17.sh as root (make system-deps does)"
        )
    try:
        out = subprocess.run(
            [str(bin_dir / "containerd"), "--version"], capture_output=True, text=True, timeout=10
        ).stdout
    except (OSError, subprocess.SubprocessError) as e:
        return f"{bin_dir / 'containerd'} does not run here: {e}"
    if " 1.7." not in out:
        return f"{bin_dir / 'containerd'} is not containerd 1.7: {out.strip()!r}"
    if shutil.which("runc") is None:
        return "missing runc; on Debian/Ubuntu `apt-get install runc` (as root)"
    if images.find_busybox() is None:
        return "missing busybox (static); on Debian/Ubuntu `apt-get install busybox-static`"
    if os.geteuid() != 0:
        return f"containerd and runc need root (running as uid {os.geteuid()})"
    if not Path("/sys/fs/cgroup").is_dir():
        return "no cgroup file system at /sys/fs/cgroup"
    return None


def _nri_section(workdir: Path, socket: Path) -> str:
    q = _toml_str
    return f"""
  [plugins."io.containerd.nri.v1.nri"]
    disable = false
    disable_connections = false
    socket_path = {q(str(socket))}
    plugin_path = {q(str(workdir / "nri" / "plugins"))}
    plugin_config_path = {q(str(workdir / "nri" / "conf.d"))}
    plugin_registration_timeout = "5s"
    plugin_request_timeout = "2s"
"""


class NriContainerd(PrivateContainerd):
    """containerd 1.7 with NRI on, in a temporary folder (same life cycle as PrivateContainerd).

    ``nri_socket``: where a plugin connects. The socket is re-created by containerd at each
    start; ``wait_nri_socket()`` waits for it.
    """

    def __init__(self, workdir: str | os.PathLike[str] | None = None, **kwargs: object) -> None:
        kwargs.setdefault("bin_dir", containerd17_bin_dir())
        super().__init__(workdir, **kwargs)  # type: ignore[arg-type]
        self.nri_socket = str(self.workdir / "nri.sock")
        self.runc_binary = shutil.which("runc") or "/usr/sbin/runc"

    def unavailable(self) -> str | None:
        return containerd17_available()

    def render(self) -> str:
        assert self.snapshotter is not None
        for d in ("nri/plugins", "nri/conf.d"):
            (self.workdir / d).mkdir(parents=True, exist_ok=True)
        return render_config(
            self.workdir,
            Path(self.socket),
            self.snapshotter,
            runc_binary=self.runc_binary,
            extra=_nri_section(self.workdir, Path(self.nri_socket)),
        )

    def start(self) -> NriContainerd:
        if not self.running():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.nri_socket)  # a stale one would fool wait_nri_socket
        super().start()
        self.wait_nri_socket()
        return self

    def wait_nri_socket(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not os.path.exists(self.nri_socket):
            if time.monotonic() > deadline:
                raise ContainerdError(
                    f"containerd 1.7 made no NRI socket at {self.nri_socket}; log tail:\n"
                    f"{self.log_tail()}"
                )
            time.sleep(0.05)
