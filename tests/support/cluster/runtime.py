"""The cluster's container runtime: containerd 2.x (the default) or CRI-O (``RUNTIME=crio``),
started, given the images, and found again (its monitors: containerd's shims, CRI-O's conmons).

Both run out of the cluster's runtime folder (``Layout.runtime_dir``) with the cgroupfs driver,
the pause image made locally, Debian's CNI plugins with the bed's own configuration folder, NRI
on with its own socket, and CDI from the bed's folder. containerd's images are imported with
``ctr``; CRI-O cannot import an archive, so they are copied into its containers-storage store
with skopeo, as an operator preloads a node's images.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tests.support import images as test_images
from tests.support.cluster import components as comp
from tests.support.cluster import configs, procs
from tests.support.cluster.layout import CNI_BIN_DIR, PAUSE_IMAGE, RUNC, Layout
from tests.support.crio_config import attach_dir, crio_argv, crio_conf, crio_env, storage_reference
from tests.support.crio_config import write_support_files as write_crio_files


def process_name(lay: Layout) -> str:
    """The runtime daemon's name among the cluster's processes (its pid file and log)."""
    return lay.runtime


def crio_bin_dir() -> Path:
    from tests.support.crio import crio_bin_dir as found

    return found()


def crio_driver(snapshotter: str) -> str:
    return "overlay" if snapshotter == "overlayfs" else "vfs"


def start(lay: Layout, bins: dict[str, Path], snapshotter: str) -> None:
    """Start the runtime and wait for its CRI and NRI sockets."""
    if lay.runtime == "crio":
        argv, env = _crio(lay, snapshotter)
    else:
        for d in ("root", "state", "runc", "nri/plugins", "nri/conf.d"):
            (lay.runtime_dir / d).mkdir(parents=True, exist_ok=True)
        (lay.config / "containerd.toml").write_text(configs.containerd_config(lay, snapshotter))
        argv = comp.containerd_argv(bins, lay)
        env = dict(os.environ, PATH=f"{bins['containerd']}:{os.environ.get('PATH', '')}")
    lay.runtime_socket.unlink(missing_ok=True)
    name = process_name(lay)
    procs.start(lay, name, argv, env=env)
    procs.wait_until(
        f"{name}'s socket and NRI socket",
        lambda: lay.runtime_socket.is_socket() and lay.nri_socket.is_socket(),
        60,
        log=lay.log(name),
    )


def forget(lay: Layout) -> None:
    """Remove what the runtime keeps outside the cluster's folder (CRI-O's attach sockets'
    folder), once it is stopped."""
    if lay.runtime == "crio":
        shutil.rmtree(attach_dir(lay.runtime_dir), ignore_errors=True)


def _crio(lay: Layout, snapshotter: str) -> tuple[list[str], dict[str, str]]:
    folder = lay.runtime_dir
    driver = crio_driver(snapshotter)
    wrapper = write_crio_files(folder, driver, RUNC)
    lay.runtime_socket.parent.mkdir(parents=True, exist_ok=True)
    (folder / "registries.conf").write_text("")  # no registry: every image is preloaded
    bins = crio_bin_dir()
    (folder / "crio.conf").write_text(
        crio_conf(
            folder,
            socket=lay.runtime_socket,
            nri_socket=lay.nri_socket,
            driver=driver,
            pinns=str(bins / "pinns"),
            runc_wrapper=wrapper,
            pause_image=PAUSE_IMAGE,
            cni_conf=lay.cni_conf,
            cni_bins=[Path(CNI_BIN_DIR)],
            cdi_dir=lay.cdi_dir,
            header="Written by tests.support.cluster: the cluster test bed's private CRI-O.",
        )
    )
    return crio_argv(bins / "crio", folder), crio_env(folder, dict(os.environ))


def _run(argv: list[str], env: dict[str, str] | None = None, timeout: float = 600) -> None:
    out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {out.returncode}:\n{out.stderr[-3000:]}")


def import_images(lay: Layout, bins: dict[str, Path], refs: list[str], snapshotter: str) -> None:
    """podman's images ``refs`` and the test pods' busybox into the runtime's store."""
    lay.images.mkdir(parents=True, exist_ok=True)
    archives: list[tuple[str, Path, str]] = []
    for ref in refs:
        archive = lay.images / (ref.rsplit("/", 1)[-1].replace(":", "_") + ".tar")
        archive.unlink(missing_ok=True)
        _run(["podman", "save", "--format=docker-archive", f"--output={archive}", ref])
        archives.append((ref, archive, "docker-archive"))
    busybox = test_images.build_oci_archive(lay.images / "busybox.oci.tar", test_images.BUSYBOX)
    archives.append((test_images.BUSYBOX_IMAGE, busybox, "oci-archive"))
    for ref, archive, kind in archives:
        if lay.runtime == "crio":
            folder, driver = lay.runtime_dir, crio_driver(snapshotter)
            _run(
                [
                    "skopeo",
                    "copy",
                    "--quiet",
                    f"{kind}:{archive}",
                    storage_reference(folder, driver, ref),
                ],
                env=crio_env(folder, dict(os.environ)),
            )
        else:
            _run(
                [
                    str(bins["containerd"] / "ctr"),
                    f"--address={lay.runtime_socket}",
                    "--namespace=k8s.io",
                    "images",
                    "import",
                    f"--snapshotter={snapshotter}",
                    str(archive),
                ]
            )
        archive.unlink()


def monitor_pids(lay: Layout) -> set[int]:
    """The processes that hold the pods' containers: containerd's runc shims (their command
    line names its socket) or CRI-O's conmons (theirs name its folder)."""
    if lay.runtime == "crio":
        needle, kind = str(lay.runtime_dir).encode() + b"/", b"conmon"
    else:
        needle, kind = str(lay.runtime_socket).encode(), b"containerd-shim"
    found: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if kind in cmd.split(b"\0", 1)[0] and needle in cmd:
            found.add(int(entry.name))
    return found
