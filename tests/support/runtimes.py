"""The runtime matrix: each runtime release the tests run on, and a private instance of one.

``RELEASES`` names every runtime the tests run on (``SUPPORTED``: those of the matrix), where
its programs are and which script of
the project installs them (pinned and cached, test tooling only):

* ``containerd1.6``: the system's (bookworm's package, on the PATH);
* ``containerd1.7``: trixie's package extracted by ``.ci/containerd17.sh``, the oldest with NRI;
* ``containerd2.1``: sid's package extracted by ``tests/beds/runtimes/containerd21.sh``;
* ``containerd2.4``: built from its Go module by ``tests/beds/runtimes/containerd2.sh``;
* ``crio1.34``: CRI-O built from its Go module by ``tests/beds/runtimes/crio.sh``, run by
  tests.support.crio.PrivateCrio (an NriContainerd in all but its configuration).

``NriContainerd`` runs one of them the way ``PrivateContainerd`` runs the system's (its own root,
state, sockets and runc root in a temporary folder), with bookworm's runc and its NRI plugin on:
the NRI socket is ``<workdir>/nri.sock``, plugins get 5 s to register and 2 s per request, as
containerd's defaults (FACTS.md). 2.x gets a configuration of version 3 (the CRI plugin split
into ``io.containerd.cri.v1.runtime`` and ``io.containerd.cri.v1.images``); ``registry_config``
points the image service at a ``hosts.toml`` folder (critest's images from a loopback registry).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support import images
from tests.support.containerd import ContainerdError, PrivateContainerd
from tests.support.containerd_config import DISABLED_PLUGINS, render_config, toml_str

REPO = Path(__file__).resolve().parents[2]
CACHE_ENV = "KRE_BEDS_CACHE"
DEFAULT_CACHE = "/var/cache/kube-resource-enforcer"
_PROGRAMS = ("containerd", "ctr", "containerd-shim-runc-v2")
_BEDS = "tests/beds/runtimes"


def _cache() -> Path:
    return Path(os.environ.get(CACHE_ENV, DEFAULT_CACHE))


def crio_version() -> str:
    """The CRI-O that tests/beds/runtimes/crio.sh builds (its go.mod pins it)."""
    gomod = (REPO / "tests/beds/runtimes/crio/go.mod").read_text()
    found = re.search(r"github\.com/cri-o/cri-o v(\S+)", gomod)
    assert found, "tests/beds/runtimes/crio/go.mod does not require cri-o"
    return found.group(1)


def containerd2_version() -> str:
    """The containerd 2.x that tests/beds/runtimes/containerd2.sh builds (its go.mod pins it)."""
    gomod = (REPO / "tests/beds/runtimes/containerd2/go.mod").read_text()
    found = re.search(r"github\.com/containerd/containerd/v2 v(\S+)", gomod)
    assert found, "tests/beds/runtimes/containerd2/go.mod does not require containerd/v2"
    return found.group(1)


@dataclass(frozen=True)
class Release:
    """One runtime of the matrix: ``name`` is the test id (``containerd2.1``, ``crio1.34``)."""

    name: str
    series: str  # what the CRI runtime_version starts with ("2.1.")
    installer: str  # the command that installs it, relative to the repository
    nri: bool  # whether it has NRI (1.7 and newer)
    fixture: str  # the session fixture of tests/conftest.py that runs it

    def bin_dir(self) -> Path | None:
        """Where its programs are; None: the PATH (the system's containerd)."""
        if self.name == "containerd1.6":
            return None
        if self.name == "containerd1.7":
            root = os.environ.get("KRE_CONTAINERD17_ROOT", f"{DEFAULT_CACHE}/containerd-1.7")
            return Path(root) / "root" / "usr" / "bin"
        if self.name == "containerd2.1":
            return _cache() / "containerd-2.1" / "root" / "usr" / "bin"
        if self.crio:
            return _cache() / f"crio-{crio_version()}" / "bin"
        return _cache() / f"containerd-{containerd2_version()}" / "bin"

    @property
    def crio(self) -> bool:
        return self.name.startswith("crio")

    @property
    def config_version(self) -> int:
        return 3 if self.series.startswith("2.") else 2

    def unavailable(self) -> str | None:
        """None when a private instance of this release can run here, else why not."""
        if self.crio:
            from tests.support.crio import crio_available

            return crio_available()
        bin_dir = self.bin_dir()
        if bin_dir is None:
            from tests.support.containerd import containerd_available

            return containerd_available()
        missing = [p for p in _PROGRAMS if not os.access(bin_dir / p, os.X_OK)]
        if missing:
            return (
                f"no {self.name} under {bin_dir} (missing {', '.join(missing)}); "
                f"run {self.installer} as root (make system-deps does)"
            )
        try:
            out = subprocess.run(
                [str(bin_dir / "containerd"), "--version"],
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout
        except (OSError, subprocess.SubprocessError) as e:
            return f"{bin_dir / 'containerd'} does not run here: {e}"
        if not re.search(rf"\sv?{re.escape(self.series)}", out):
            return f"{bin_dir / 'containerd'} is not {self.name}: {out.strip()!r}"
        if shutil.which("runc") is None:
            return "missing runc; on Debian/Ubuntu `apt-get install runc` (as root)"
        if images.find_busybox() is None:
            return "missing busybox (static); on Debian/Ubuntu `apt-get install busybox-static`"
        if os.geteuid() != 0:
            return f"containerd and runc need root (running as uid {os.geteuid()})"
        if not Path("/sys/fs/cgroup").is_dir():
            return "no cgroup file system at /sys/fs/cgroup"
        return None


RELEASES: dict[str, Release] = {
    r.name: r
    for r in (
        Release("containerd1.6", "1.6.", "apt-get install containerd", False, "containerd16"),
        Release("containerd1.7", "1.7.", ".ci/containerd17.sh", True, "containerd17"),
        Release("containerd2.1", "2.1.", f"{_BEDS}/containerd21.sh", True, "containerd21"),
        Release("containerd2.4", "2.4.", f"{_BEDS}/containerd2.sh", True, "containerd24"),
        Release("crio1.34", "1.34.", f"{_BEDS}/crio.sh", True, "crio134"),
    )
}
NRI_RELEASES = tuple(name for name, r in RELEASES.items() if r.nri)
# The supported runtimes, where the relay's end-to-end modules run: containerd 1.6 reached end of
# life (July 23, 2025), so it left the matrix; it stays the system's containerd, which the
# modules that are not about the runtime (tests/faults, tests/hostile, ...) keep to.
SUPPORTED = tuple(name for name in RELEASES if name != "containerd1.6")


def private_runtime(release: Release | str, **kwargs: Any) -> NriContainerd:
    """A new private instance of ``release``: tests.support.crio.PrivateCrio for CRI-O, else an
    NriContainerd."""
    found = RELEASES[release] if isinstance(release, str) else release
    if found.crio:
        from tests.support.crio import PrivateCrio

        return PrivateCrio(**kwargs)
    return NriContainerd(release=found, **kwargs)


def session_runtime(request: Any, name: str) -> PrivateContainerd:
    """The session's instance of release ``name`` (``request``: a pytest FixtureRequest),
    checked to be that release."""
    runtime: PrivateContainerd = request.getfixturevalue(RELEASES[name].fixture)
    reply = runtime.version()
    version = reply.runtime_version.removeprefix("v")
    assert version.startswith(RELEASES[name].series), f"{name} runs {reply.runtime_name} {version}"
    return runtime


def _nri_section(workdir: Path, socket: Path) -> str:
    q = toml_str
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


TOLERATE_MISSING = "tolerate-missing-nri-plugins.noderesource.dev"
# What docs/nri.md tells an operator of containerd 2.2+ to add: the default validator.
REQUIRE_PLUGIN_TOML = REPO / "deploy" / "nri" / "containerd-require-plugin.toml"


def _validator_section(required: tuple[str, ...]) -> str:
    """deploy/nri's validator table, with ``required`` as the required plugins."""
    text = REQUIRE_PLUGIN_TOML.read_text()
    plugins = ", ".join(toml_str(p) for p in required)
    line = 'required_plugins = ["resource-enforcer"]'
    assert line in text, f"{REQUIRE_PLUGIN_TOML} lost its line {line}"
    return "\n" + text.replace(line, f"required_plugins = [{plugins}]")


def render_config_v3(
    workdir: Path,
    socket: Path,
    snapshotter: str,
    *,
    runc_binary: str,
    registry_config: Path | None = None,
    extra: str = "",
) -> str:
    """containerd 2.x config.toml (version 3) for a private instance living in ``workdir``:
    the same choices as ``render_config`` (FACTS.md), under 2.x's plugin names."""
    q = toml_str
    rt = "[plugins.'io.containerd.cri.v1.runtime'"
    im = "[plugins.'io.containerd.cri.v1.images'"
    disabled = ", ".join(q(p) for p in DISABLED_PLUGINS)
    config_path = q(str(registry_config)) if registry_config else '""'
    return f"""\
# Written by tests.support.runtimes: a private containerd 2.x for tests.
version = 3
root = {q(str(workdir / "root"))}
state = {q(str(workdir / "state"))}
disabled_plugins = [{disabled}]
oom_score = 0

[grpc]
  address = {q(str(socket))}

[ttrpc]
  address = {q(str(socket) + ".ttrpc")}

[debug]
  address = ""

[metrics]
  address = ""

[plugins]
  [plugins.'io.containerd.internal.v1.opt']
    path = {q(str(workdir / "opt"))}

  {im}]
    snapshotter = {q(snapshotter)}

    {im}.pinned_images]
      sandbox = {q(images.PAUSE_IMAGE)}

    {im}.registry]
      # hosts.toml folders (critest's images from a loopback registry); empty: the defaults.
      config_path = {config_path}

  {rt}]
    # Without this runc fails here: lowering oom_score_adj is not permitted.
    restrict_oom_score_adj = true
    disable_apparmor = true
    enable_selinux = false

    {rt}.containerd]
      default_runtime_name = "runc"

      {rt}.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"

        {rt}.containerd.runtimes.runc.options]
          SystemdCgroup = false
          Root = {q(str(workdir / "runc"))}
          BinaryName = {q(runc_binary)}

    {rt}.cni]
      bin_dirs = [{q(str(workdir / "cni" / "bin"))}]
      conf_dir = {q(str(workdir / "cni" / "net.d"))}

  [plugins.'io.containerd.grpc.v1.cri']
    disable_tcp_service = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
{extra}"""


class NriContainerd(PrivateContainerd):
    """A containerd of the matrix with NRI on, in a temporary folder (same life cycle as
    PrivateContainerd); ``release`` defaults to 1.7.

    ``nri_socket``: where a plugin connects. The socket is re-created by containerd at each
    start; ``wait_nri_socket()`` waits for it. ``required_plugins``: turns NRI's default
    validator on with these plugins required (as docs/nri.md tells an operator; containerd
    2.2 and later act on it, 2.1 ignores it).
    """

    def __init__(
        self,
        workdir: str | os.PathLike[str] | None = None,
        *,
        release: Release | str = "containerd1.7",
        registry_config: str | os.PathLike[str] | None = None,
        required_plugins: tuple[str, ...] = (),
        **kwargs: object,
    ) -> None:
        self.release = RELEASES[release] if isinstance(release, str) else release
        self.required_plugins = required_plugins
        kwargs.setdefault("bin_dir", self.release.bin_dir())
        super().__init__(workdir, **kwargs)  # type: ignore[arg-type]
        self.nri_socket = str(self.workdir / "nri.sock")
        self.runc_binary = shutil.which("runc") or "/usr/sbin/runc"
        self.registry_config = Path(registry_config) if registry_config else None

    def unavailable(self) -> str | None:
        return self.release.unavailable()

    def render(self) -> str:
        assert self.snapshotter is not None
        assert self.runc_binary is not None
        for d in ("nri/plugins", "nri/conf.d"):
            (self.workdir / d).mkdir(parents=True, exist_ok=True)
        nri = _nri_section(self.workdir, Path(self.nri_socket))
        if self.required_plugins:
            nri += _validator_section(self.required_plugins)
        if self.release.config_version == 3:
            return render_config_v3(
                self.workdir,
                Path(self.socket),
                self.snapshotter,
                runc_binary=self.runc_binary,
                registry_config=self.registry_config,
                extra=nri,
            )
        registry = ""
        if self.registry_config is not None:
            registry = (
                '\n  [plugins."io.containerd.grpc.v1.cri".registry]\n'
                f"    config_path = {toml_str(str(self.registry_config))}\n"
            )
        return render_config(
            self.workdir,
            Path(self.socket),
            self.snapshotter,
            runc_binary=self.runc_binary,
            extra=nri + registry,
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
                    f"{self.release.name} made no NRI socket at {self.nri_socket}; log tail:\n"
                    f"{self.log_tail()}"
                )
            time.sleep(0.05)
