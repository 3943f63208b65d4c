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

import pytest

from tests.support import images
from tests.support.containerd import ContainerdError
from tests.support.containerd_config import toml_str
from tests.support.host_cleanup import pids
from tests.support.registry import LocalRegistry, registry_available
from tests.support.runtimes import NriContainerd

CONMON = "/usr/bin/conmon"
RUNC_WRAPPER = Path(__file__).with_name("crio_runc.py")
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


# What the relay does not do on CRI-O yet (docs/testing.md, "CRI-O, as found here"): a test that
# meets one is an expected failure there (strict: it fails when it starts to pass).
KNOWN_GAPS = {
    "beta-dialect": (
        "CRI-O reads the beta-dialect class annotations from the sandbox as RunPodSandbox gave "
        "them, which the relay passes on unchanged ('RDT not initialized')"
    ),
    "rebuild": (
        "CRI-O's verbose status carries no creation config (only runtimeSpec): a lost state "
        "cannot be rebuilt from it"
    ),
}


def expect_gap(request: pytest.FixtureRequest, runtime: object, gap: str) -> None:
    """Mark the running test an expected failure (strict) when ``runtime`` is CRI-O."""
    if isinstance(runtime, PrivateCrio):
        request.applymarker(pytest.mark.xfail(reason=KNOWN_GAPS[gap], strict=True))


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
        return [
            self.binary("crio"),
            "--config",
            str(self.config_path),
            "--config-dir",
            str(self.workdir / "crio.conf.d"),
            "--log-level",
            self.log_level,
            # CRI-O's own flags: it reads neither CONTAINERS_REGISTRIES_CONF nor /etc's file
            # with them given (its pulls, the OCI-artifact probe first, use its SystemContext).
            "--registries-conf",
            str(self.workdir / "registries.conf"),
            "--registries-conf-dir",
            str(self.workdir / "registries.conf.d"),
        ]

    def daemon_env(self) -> dict[str, str] | None:
        return dict(
            os.environ,
            CONTAINERS_STORAGE_CONF=str(self.workdir / "storage.conf"),
            CONTAINERS_REGISTRIES_CONF=str(self.workdir / "registries.conf"),
        )

    def render(self) -> str:
        w, q = self.workdir, toml_str
        for d in (
            "crio.conf.d",
            "registries.conf.d",
            "nri/plugins",
            "nri/conf.d",
            "exits",
            "attach",
            "ns",
            "logs",
        ):
            (w / d).mkdir(parents=True, exist_ok=True)
        driver = "overlay" if self.snapshotter == "overlayfs" else "vfs"
        (w / "storage.conf").write_text(
            f'[storage]\ndriver = "{driver}"\nrunroot = {q(str(w / "state"))}\n'
            f"graphroot = {q(str(w / 'root'))}\n"
        )
        (w / "policy.json").write_text('{"default": [{"type": "insecureAcceptAnything"}]}\n')
        if not self.registry.port:
            self.registry.start()
        self.registry.registries_conf(w / "registries.conf")
        pinns = str(self.bin_dir / "pinns") if self.bin_dir else "pinns"
        # runc behind a wrapper that does what containerd's restrict_oom_score_adj does.
        wrapper = w / "runc-restricted"
        wrapper.write_text(
            f'#!/bin/sh\nexec /usr/bin/python3 -I {RUNC_WRAPPER} {self.runc_binary} "$@"\n'
        )
        wrapper.chmod(0o755)
        return f"""\
# Written by tests.support.crio: a private CRI-O for tests.
[crio]
root = {q(str(w / "root"))}
runroot = {q(str(w / "state"))}
storage_driver = {q(driver)}
log_dir = {q(str(w / "logs"))}
version_file = {q(str(w / "state" / "version"))}
version_file_persist = {q(str(w / "root" / "version"))}
clean_shutdown_file = {q(str(w / "root" / "clean.shutdown"))}

[crio.api]
listen = {q(self.socket)}
stream_address = "127.0.0.1"
stream_port = "0"

[crio.runtime]
default_runtime = "runc"
cgroup_manager = "cgroupfs"
conmon_cgroup = "pod"
pinns_path = {q(pinns)}
namespaces_dir = {q(str(w / "ns"))}
container_exits_dir = {q(str(w / "exits"))}
container_attach_socket_dir = {q(str(w / "attach"))}
hooks_dir = []
selinux = false
apparmor_profile = ""
irqbalance_config_file = {q(str(w / "irqbalance"))}
cdi_spec_dirs = [{q(str(w / "cdi"))}]

[crio.runtime.runtimes.runc]
runtime_path = {q(str(wrapper))}
runtime_type = "oci"
runtime_root = {q(str(w / "runc"))}
monitor_path = {q(CONMON)}
monitor_cgroup = "pod"

[crio.image]
pause_image = {q(images.PAUSE_IMAGE)}
signature_policy = {q(str(w / "policy.json"))}

[crio.network]
network_dir = {q(str(w / "cni" / "net.d"))}
plugin_dirs = [{q(str(w / "cni" / "bin"))}]

[crio.nri]
enable_nri = true
nri_listen = {q(self.nri_socket)}
nri_plugin_dir = {q(str(w / "nri" / "plugins"))}
nri_plugin_config_dir = {q(str(w / "nri" / "conf.d"))}
nri_plugin_registration_timeout = "5s"
nri_plugin_request_timeout = "2s"

[crio.metrics]
enable_metrics = false
"""

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
