"""A private CRI-O of the runtime matrix, with the same life cycle as PrivateContainerd.

``tests/beds/runtimes/crio.sh`` builds crio and pinns (CRI-O 1.34.0 from its Go module) into
``$KRE_BEDS_CACHE/crio-1.34.0/bin``; conmon and runc are bookworm's. ``PrivateCrio`` runs that
crio out of a temporary folder: its own storage root and run root, CRI socket, NRI socket
(``<workdir>/nri.sock``, NRI on, 5 s to register and 2 s per request as containerd's), runc
root, cgroupfs cgroup manager (container cgroups are ``<parent>/crio-<id>``), and no
configuration read from /etc (``--config``, an empty ``--config-dir``, and the containers
storage and registries files pointed at its own folder). CRI-O cannot import an image archive,
so its images come from a loopback registry (tests.support.registry) it owns, pulled over CRI.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from pathlib import Path

from tests.support import images
from tests.support.containerd import ContainerdError
from tests.support.crio_config import (
    CONMON,
    attach_dir,
    crio_argv,
    crio_conf,
    crio_env,
    write_support_files,
)
from tests.support.host_cleanup import pids
from tests.support.registry import LocalRegistry, registry_available
from tests.support.runtimes import NriContainerd

CRIO = "crio1.34"  # its test id in the matrix
INSTALLER = "tests/beds/runtimes/crio.sh"


def crio_bin_dir() -> Path:
    from tests.support.runtimes import RELEASES

    found = RELEASES[CRIO].bin_dir()
    assert found is not None
    return found


def crio_available() -> str | None:
    """None when a private CRI-O can run here, else why not."""
    bin_dir = crio_bin_dir()
    missing = [p for p in ("crio", "pinns") if not os.access(bin_dir / p, os.X_OK)]
    if missing:
        return f"no CRI-O under {bin_dir} (missing {', '.join(missing)}); run {INSTALLER}"
    if not os.access(CONMON, os.X_OK):
        return "missing conmon; on Debian `apt-get install conmon`"
    if shutil.which("runc") is None:
        return "missing runc; on Debian/Ubuntu `apt-get install runc` (as root)"
    if os.geteuid() != 0:
        return f"CRI-O and runc need root (running as uid {os.geteuid()})"
    return registry_available()


class PrivateCrio(NriContainerd):
    """CRI-O in a temporary folder; ``socket``, ``nri_socket``, ``release``, ``version()``,
    ``restart()``, ``remove_all_pods()`` and ``close()`` as NriContainerd's."""

    def __init__(
        self,
        workdir: str | os.PathLike[str] | None = None,
        *,
        registry: LocalRegistry | None = None,
        **kwargs: object,
    ) -> None:
        kwargs.setdefault("release", CRIO)
        super().__init__(workdir, **kwargs)  # type: ignore[arg-type]
        self.socket = str(self.workdir / "crio.sock")
        self.address = f"unix://{self.socket}"
        self.config_path = self.workdir / "crio.conf"
        self.log_path = self.workdir / "crio.log"
        self._own_registry = registry is None
        self.registry = registry or LocalRegistry(self.workdir / "registry")

    def unavailable(self) -> str | None:
        return crio_available()

    def daemon_command(self) -> list[str]:
        return crio_argv(Path(self.binary("crio")), self.workdir, self.log_level)

    def daemon_env(self) -> dict[str, str] | None:
        return crio_env(self.workdir, dict(os.environ))

    def render(self) -> str:
        w = self.workdir
        driver = "overlay" if self.snapshotter == "overlayfs" else "vfs"
        wrapper = write_support_files(w, driver, self.runc_binary)
        if not self.registry.port:
            self.registry.start()
        self.registry.registries_conf(w / "registries.conf")
        return crio_conf(
            w,
            socket=Path(self.socket),
            nri_socket=Path(self.nri_socket),
            driver=driver,
            pinns=str(self.bin_dir / "pinns") if self.bin_dir else "pinns",
            runc_wrapper=wrapper,
            pause_image=images.PAUSE_IMAGE,
            cni_conf=w / "cni" / "net.d",
            cni_bins=[w / "cni" / "bin"],
            cdi_dir=w / "cdi",
            header="Written by tests.support.crio: a private CRI-O for tests.",
        )

    def _import_images(self) -> None:
        """Push the busybox and pause images to the registry, then pull them over CRI."""
        from enforcer.cri import api_pb2, api_pb2_grpc

        archives = images.build_default_images(self.workdir / "images")
        with self.channel() as ch:
            stub = api_pb2_grpc.ImageServiceStub(ch)
            for name, archive in archives.items():
                self.registry.push(archive, name)
                try:
                    stub.PullImage(
                        api_pb2.PullImageRequest(image=api_pb2.ImageSpec(image=name)), timeout=120
                    )
                except Exception as e:
                    raise ContainerdError(
                        f"CRI-O could not pull {name} from {self.registry.address}: {e}; "
                        f"log tail:\n{self.log_tail()}"
                    ) from e
        self._images_imported = True

    def start(self) -> PrivateCrio:
        super().start()  # and waits for the NRI socket
        return self

    def close(self) -> None:
        try:
            super().close()
        finally:
            shutil.rmtree(attach_dir(self.workdir), ignore_errors=True)
            if self._own_registry:
                self.registry.close()

    def _kill_leftovers(self) -> None:
        marker = str(self.workdir).encode()
        for pid in pids():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"conmon" in cmdline and marker in cmdline:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        root = self.workdir / "runc"
        if root.is_dir():
            for ctr_dir in root.iterdir():
                subprocess.run(
                    ["runc", "--root", str(root), "delete", "--force", ctr_dir.name],
                    capture_output=True,
                    timeout=30,
                )
