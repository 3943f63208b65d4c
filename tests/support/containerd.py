"""A private containerd for tests and the demo.

``PrivateContainerd`` runs its own containerd out of a temporary folder: its own root, state,
gRPC and ttrpc sockets, runc root and config, so that it never touches a system containerd on
the default paths. Its CRI plugin is set up the way this machine needs (see FACTS.md):

* ``restrict_oom_score_adj = true``: lowering oom_score_adj is not permitted here, and without
  this runc fails with "can't get final child's PID from pipe: EOF";
* ``sandbox_image`` = a locally built pause image (there is no registry to pull from);
* cgroupfs driver (``SystemdCgroup = false``), so cgroup paths are ``<parent>/<container id>``;
* no CNI: pods use the host network (``namespace_options.network = NODE``);
* snapshotter overlayfs when an overlay mount works here, else native.

Containers outlive a ``restart()`` (the shims keep running and containerd reconnects to them on
start), which the "containerd restarted under the relay" tests rely on.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from tests.support import images
from tests.support.containerd_config import overlayfs_works, render_config, snapshotter_from_config
from tests.support.host_cleanup import (
    existing_pod_cgroups,
    kill_group,
    pids,
    remove_new_pod_cgroups,
    remove_pod_cgroups_of,
    unmount_under,
)

REQUIRED_BINARIES = ("containerd", "ctr", "runc", "containerd-shim-runc-v2")
# containerd 1.6 always puts shim sockets in /run/containerd/s (named by a hash of our socket
# path, so no clash); we remove these folders again if they were not there before.
_SHIM_SOCKET_DIRS = ("/run/containerd/s", "/run/containerd")
# The containerd namespace the CRI plugin keeps its containers in.
CRI_NAMESPACE = "k8s.io"


class ContainerdError(RuntimeError):
    """containerd did not come up, or an operation on it failed."""


@dataclass
class Leftovers:
    """Containers CRI could not remove for their tasks, removed once the task was deleted."""

    stuck: list[str] = field(default_factory=list)  # containerd#11037 (see `stuck_task`)
    other: list[str] = field(default_factory=list)  # anything else: worth a look


def stuck_task(status: Any, refusal: str) -> bool:
    """containerd#11037: a StartContainer cut off while containerd made the task (a relay
    killed mid-call, kubelet's deadline) leaves the container exited, reason StartError, with
    its task made and never started; CRI can then neither stop nor remove it (``refusal``:
    "cannot delete running task"). ``status``: CRI's ContainerStatus of the container."""
    from enforcer.cri import api_pb2

    return (
        "running task" in refusal
        and status.state == api_pb2.CONTAINER_EXITED
        and status.reason == "StartError"
    )


def containerd_available() -> str | None:
    """None when a private containerd can run here, else the reason why not."""
    missing = [b for b in REQUIRED_BINARIES if shutil.which(b) is None]
    if images.find_busybox() is None:
        missing.append("busybox (static)")
    if missing:
        return (
            f"missing {', '.join(missing)}; on Debian/Ubuntu install them with "
            "`apt-get install containerd runc busybox-static` (as root)"
        )
    if os.geteuid() != 0:
        return f"containerd and runc need root (running as uid {os.geteuid()})"
    if not Path("/sys/fs/cgroup").is_dir():
        return "no cgroup file system at /sys/fs/cgroup"
    return None


class PrivateContainerd:
    """A containerd of our own, with the CRI plugin, in a temporary folder.

    Use as a context manager, or call ``start()`` and ``close()``::

        with PrivateContainerd() as ctrd:
            emulator = KubeletEmulator(ctrd.socket)

    ``stop()`` stops the daemon and keeps its folder (containers keep running under their
    shims); ``start()`` after ``stop()``, or ``restart()``, brings the same instance back.
    ``close()`` removes every pod, stops the daemon and deletes the folder.
    """

    def __init__(
        self,
        workdir: str | os.PathLike[str] | None = None,
        *,
        snapshotter: str | None = None,
        import_images: bool = True,
        start_timeout: float = 30.0,
        log_level: str = "info",
        bin_dir: str | os.PathLike[str] | None = None,
        runc_binary: str | None = None,
    ) -> None:
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="kre-ctrd-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        # A unix socket path must stay under 108 bytes; a short name helps.
        self.socket = str(self.workdir / "containerd.sock")
        self.address = f"unix://{self.socket}"
        self.config_path = self.workdir / "config.toml"
        self.log_path = self.workdir / "containerd.log"
        self.runc_root = self.workdir / "runc"
        self.snapshotter = snapshotter
        self.import_images = import_images
        self.start_timeout = start_timeout
        self.log_level = log_level
        self.pause_image = images.PAUSE_IMAGE
        self.busybox_image = images.BUSYBOX_IMAGE
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: object | None = None
        self._images_imported = False
        self._closed = False
        self._cgroups_before: set[str] | None = None
        self._run_dirs_before: set[str] = set()
        # Where containerd, ctr and the shim are taken from (None: the PATH). A containerd run
        # from here finds its own shim first on its PATH.
        self.bin_dir = Path(bin_dir) if bin_dir else None
        self.runc_binary = runc_binary  # the runc the shim runs (None: runc on the PATH)

    def binary(self, name: str) -> str:
        """The path of one of containerd's programs (``containerd``, ``ctr``) for this instance."""
        return str(self.bin_dir / name) if self.bin_dir else name

    def unavailable(self) -> str | None:
        """None when this instance can run here, else the reason why not."""
        return containerd_available()

    def daemon_command(self) -> list[str]:
        """The daemon's command line (a subclass may run another runtime)."""
        return [self.binary("containerd"), "--config", str(self.config_path), "--log-level",
                self.log_level]  # fmt: skip

    def daemon_env(self) -> dict[str, str] | None:
        """The daemon's environment; None: this process's."""
        if self.bin_dir is None:
            return None
        return dict(os.environ, PATH=f"{self.bin_dir}:{os.environ.get('PATH', '')}")

    def render(self) -> str:
        """This instance's config.toml; subclasses add their sections."""
        assert self.snapshotter is not None
        return render_config(
            self.workdir, Path(self.socket), self.snapshotter, runc_binary=self.runc_binary
        )

    # -- life cycle -------------------------------------------------------------------------

    def __enter__(self) -> PrivateContainerd:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> PrivateContainerd:
        """Start containerd (first time: write the config and import the images)."""
        if self._closed:
            raise ContainerdError("this PrivateContainerd was closed; make a new one")
        if self.running():
            return self
        reason = self.unavailable()
        if reason:
            raise ContainerdError(f"cannot run containerd here: {reason}")
        if self._cgroups_before is None:
            self._cgroups_before = existing_pod_cgroups()
            self._run_dirs_before = {d for d in _SHIM_SOCKET_DIRS if os.path.isdir(d)}
        if not self.config_path.exists():
            for d in ("root", "state", "opt", "runc", "cni/bin", "cni/net.d", "images", "pods"):
                (self.workdir / d).mkdir(parents=True, exist_ok=True)
            if self.snapshotter is None:
                self.snapshotter = "overlayfs" if overlayfs_works(self.workdir) else "native"
            self.config_path.write_text(self.render())
        elif self.snapshotter is None:
            self.snapshotter = snapshotter_from_config(self.config_path.read_text())

        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket)  # a stale socket from a killed run would fool the wait
        log = open(self.log_path, "ab")  # noqa: SIM115 - kept open for the daemon's lifetime
        log.write(f"\n==== starting containerd at {time.ctime()} ====\n".encode())
        log.flush()
        self._log_file = log
        # start_new_session: containerd leads its own process group, so stop() can kill it and
        # any helper it forked in one go. The shims put themselves in their own groups and
        # survive, as on a real node.
        env = self.daemon_env()
        self._proc = subprocess.Popen(
            self.daemon_command(),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )
        try:
            self._wait_ready()
            if self.import_images and not self._images_imported:
                self._import_images()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the daemon (SIGTERM, then SIGKILL, to its whole process group).

        The folder and the running containers stay, so ``start()`` brings everything back.
        """
        proc, self._proc = self._proc, None
        if proc is not None:
            kill_group(proc, timeout)
        if self._log_file is not None:
            self._log_file.close()  # type: ignore[attr-defined]
            self._log_file = None

    def restart(self, timeout: float = 10.0) -> None:
        """Stop and start again with the same root and state: containers survive."""
        self.stop(timeout)
        self.start()

    def close(self) -> None:
        """Remove all pods, stop the daemon, and delete everything this instance made."""
        if self._closed:
            return
        try:
            if self.running():
                with contextlib.suppress(Exception):
                    self.remove_all_pods()
            self.stop()
            self._kill_leftovers()
            unmount_under(self.workdir)
            remove_new_pod_cgroups(self._cgroups_before or set())
            for d in _SHIM_SOCKET_DIRS:
                if d not in self._run_dirs_before:
                    with contextlib.suppress(OSError):
                        os.rmdir(d)  # only when empty: another containerd may use it
        finally:
            self._closed = True
            if self._own_workdir:
                shutil.rmtree(self.workdir, ignore_errors=True)

    # -- helpers ----------------------------------------------------------------------------

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def channel(self):  # -> grpc.Channel
        """A new gRPC channel to this containerd's CRI socket (caller closes it)."""
        import grpc

        return grpc.insecure_channel(self.address)

    def version(self, timeout: float = 5.0):  # -> api_pb2.VersionResponse
        """CRI Version, straight from containerd."""
        from enforcer.cri import api_pb2, api_pb2_grpc

        with self.channel() as ch:
            stub = api_pb2_grpc.RuntimeServiceStub(ch)
            return stub.Version(api_pb2.VersionRequest(version="v1"), timeout=timeout)

    def delete_task(self, container_id: str, timeout: float = 30.0) -> str | None:
        """Kill and delete one container's containerd task, under CRI's feet (what an operator
        does with ``ctr -n k8s.io task rm -f``). None when done, else ctr's complaint.

        For the task containerd 1.6 leaves behind a StartContainer cancelled while the task is
        being made (containerd#11037): CRI calls the container exited (``StartError``) yet
        cannot remove it, "cannot delete running task", and only this frees it.
        """
        done = self.ctr("task", "delete", "--force", container_id, timeout=timeout)
        return None if done.returncode == 0 else (done.stderr.strip() or f"exit {done.returncode}")

    def ctr(self, *args: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        """``ctr`` on this instance's socket, in CRI's namespace (output captured, as text)."""
        return subprocess.run(
            [self.binary("ctr"), "--address", self.socket, "-n", CRI_NAMESPACE, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def remove_all_pods(self, timeout: float = 30.0) -> Leftovers:
        """Stop and remove every pod sandbox (and so every container) via CRI. A container
        CRI cannot remove for its task is removed after ``delete_task``, and named in what
        this returns: containerd#11037's stuck tasks apart from any other."""
        from enforcer.cri import api_pb2, api_pb2_grpc

        left = Leftovers()
        with self.channel() as ch:
            stub = api_pb2_grpc.RuntimeServiceStub(ch)
            listed = stub.ListContainers(api_pb2.ListContainersRequest(), timeout=timeout)
            for c in listed.containers:
                with contextlib.suppress(Exception):
                    stub.StopContainer(
                        api_pb2.StopContainerRequest(container_id=c.id, timeout=0), timeout=timeout
                    )
                remove = api_pb2.RemoveContainerRequest(container_id=c.id)
                try:
                    stub.RemoveContainer(remove, timeout=timeout)
                except Exception as exc:  # any failure: the task is tried once
                    details = exc.details() if hasattr(exc, "details") else str(exc)
                    if "running task" not in str(details):
                        continue
                    with contextlib.suppress(Exception):
                        status = stub.ContainerStatus(
                            api_pb2.ContainerStatusRequest(container_id=c.id), timeout=timeout
                        ).status
                        (left.stuck if stuck_task(status, details) else left.other).append(c.id)
                    if self.delete_task(c.id) is None:
                        with contextlib.suppress(Exception):
                            stub.RemoveContainer(remove, timeout=timeout)
            for s in stub.ListPodSandbox(api_pb2.ListPodSandboxRequest(), timeout=timeout).items:
                with contextlib.suppress(Exception):
                    stub.StopPodSandbox(
                        api_pb2.StopPodSandboxRequest(pod_sandbox_id=s.id), timeout=timeout
                    )
                with contextlib.suppress(Exception):
                    stub.RemovePodSandbox(
                        api_pb2.RemovePodSandboxRequest(pod_sandbox_id=s.id), timeout=timeout
                    )
                remove_pod_cgroups_of(s.metadata.uid)
        return left

    def _wait_ready(self) -> None:
        import grpc

        deadline = time.monotonic() + self.start_timeout
        last_error = "socket not created"
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise ContainerdError(
                    f"containerd exited with code {self._proc.returncode} while starting "
                    f"(config {self.config_path}); log tail:\n{self.log_tail()}"
                )
            if os.path.exists(self.socket):
                try:
                    self.version(timeout=2)
                    return
                except grpc.RpcError as e:
                    last_error = f"{e.code().name}: {e.details()}"  # type: ignore[attr-defined]
            time.sleep(0.1)
        raise ContainerdError(
            f"containerd did not answer CRI Version within {self.start_timeout:.0f}s "
            f"({last_error}; config {self.config_path}); log tail:\n{self.log_tail()}"
        )

    def _import_images(self) -> None:
        from enforcer.cri import api_pb2, api_pb2_grpc

        archives = images.build_default_images(self.workdir / "images")
        for archive in archives.values():
            images.import_image(
                self.socket, archive, snapshotter=self.snapshotter, ctr=self.binary("ctr")
            )
        # The CRI plugin learns of imported images through events; wait until it sees them so
        # that the first RunPodSandbox does not try to pull the pause image from a registry.
        deadline = time.monotonic() + 15
        with self.channel() as ch:
            stub = api_pb2_grpc.ImageServiceStub(ch)
            for name in archives:
                while True:
                    status = stub.ImageStatus(
                        api_pb2.ImageStatusRequest(image=api_pb2.ImageSpec(image=name)), timeout=5
                    )
                    if status.HasField("image"):
                        break
                    if time.monotonic() > deadline:
                        raise ContainerdError(
                            f"image {name} imported but not visible over CRI; log tail:\n"
                            f"{self.log_tail()}"
                        )
                    time.sleep(0.1)
        self._images_imported = True

    def _kill_leftovers(self) -> None:
        """Last resort after a failed cleanup: shims serving our socket and runc containers."""
        marker = self.socket.encode()
        for pid in pids():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"containerd-shim" in cmdline and marker in cmdline:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        if not self.runc_root.is_dir():
            return
        for ns_root in self.runc_root.iterdir():
            if not ns_root.is_dir():
                continue
            for ctr_dir in ns_root.iterdir():
                subprocess.run(
                    ["runc", "--root", str(ns_root), "delete", "--force", ctr_dir.name],
                    capture_output=True,
                    timeout=30,
                )
