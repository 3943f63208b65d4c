"""containerd's config.toml for a private instance, and the snapshotter this machine's file
system allows (an overlay mount, else native)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.support import images

# Snapshotters that cannot work in a temporary folder on ext4; disabling them also keeps their
# noisy start-up errors out of the log.
DISABLED_PLUGINS = (
    "io.containerd.snapshotter.v1.aufs",
    "io.containerd.snapshotter.v1.btrfs",
    "io.containerd.snapshotter.v1.zfs",
    "io.containerd.snapshotter.v1.devmapper",
)


def overlayfs_works(folder: str | os.PathLike[str]) -> bool:
    """Whether an overlay mount works on the file system holding ``folder``."""
    probe = Path(tempfile.mkdtemp(prefix="overlay-probe-", dir=folder))
    try:
        for d in ("lower", "upper", "work", "merged"):
            (probe / d).mkdir()
        opts = f"lowerdir={probe / 'lower'},upperdir={probe / 'upper'},workdir={probe / 'work'}"
        mounted = subprocess.run(
            ["mount", "-t", "overlay", "overlay", "-o", opts, str(probe / "merged")],
            capture_output=True,
            timeout=10,
        )
        if mounted.returncode != 0:
            return False
        subprocess.run(["umount", str(probe / "merged")], capture_output=True, timeout=10)
        return True
    except (OSError, subprocess.SubprocessError):
        return False
    finally:
        shutil.rmtree(probe, ignore_errors=True)


def toml_str(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_config(
    workdir: Path,
    socket: Path,
    snapshotter: str,
    sandbox_image: str = images.PAUSE_IMAGE,
    *,
    runc_binary: str | None = None,
    extra: str = "",
) -> str:
    """containerd config.toml (version 2) for a private instance living in ``workdir``.

    ``runc_binary``: the runc the shim runs (containerd 1.7 from trixie must use bookworm's own
    runc). ``extra``: more TOML appended at the end (the NRI section of a containerd 1.7).
    """
    q = toml_str
    cri = '[plugins."io.containerd.grpc.v1.cri"'
    disabled = ", ".join(q(p) for p in DISABLED_PLUGINS)
    binary_name = f"\n          BinaryName = {q(runc_binary)}" if runc_binary else ""
    return f"""\
# Written by tests.support.containerd: a private containerd for tests and the demo.
version = 2
root = {q(str(workdir / "root"))}
state = {q(str(workdir / "state"))}
disabled_plugins = [{disabled}]
# 0: leave containerd's own oom_score alone (lowering it is not permitted here).
oom_score = 0

[grpc]
  address = {q(str(socket))}

# Its own ttrpc socket, or it would collide with a system containerd.
[ttrpc]
  address = {q(str(socket) + ".ttrpc")}

[debug]
  address = ""

[metrics]
  address = ""

[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = {q(str(workdir / "opt"))}

  {cri}]
    sandbox_image = {q(sandbox_image)}
    # Without this runc fails here: lowering oom_score_adj is not permitted.
    restrict_oom_score_adj = true
    # Port 0: the exec/attach streaming server picks a free port.
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    disable_tcp_service = true
    # apparmor is not available here; never try to load a profile.
    disable_apparmor = true
    enable_selinux = false
    systemd_cgroup = false

    {cri}.cni]
      # No CNI plugin: pods run with host networking. Private, empty folders so that a
      # system CNI configuration is never picked up.
      bin_dir = {q(str(workdir / "cni" / "bin"))}
      conf_dir = {q(str(workdir / "cni" / "net.d"))}

    {cri}.containerd]
      snapshotter = {q(snapshotter)}
      default_runtime_name = "runc"

      {cri}.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"

        {cri}.containerd.runtimes.runc.options]
          # cgroupfs driver: container cgroup = <cgroup parent>/<container id>.
          SystemdCgroup = false
          # Own runc state folder, apart from a system containerd's /run/containerd/runc.
          Root = {q(str(workdir / "runc"))}{binary_name}
{extra}"""


def snapshotter_from_config(text: str) -> str:
    for line in text.splitlines():
        key, _, value = line.strip().partition("=")
        if key.strip() == "snapshotter":
            return value.strip().strip('"')
    return "overlayfs"
