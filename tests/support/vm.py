"""The cgroup v2 test VM: boot, run commands in, stop (``make vm-up``, ``vm-exec``, ``vm-down``).

The image (Debian, systemd with the unified cgroup hierarchy only, Debian's kernel, runc,
containerd 2.x, an ssh server) is built and cached by ``tests/beds/vm/build.sh``. The VM boots it
with QEMU's software emulation (KVM guests hang on this kind of machine, FACTS.md) as 2 sockets x
1 core x 2 threads = 4 vCPUs in 2 NUMA nodes, on a copy-on-write overlay of the cached disk (the
cache stays pristine), with a second, empty virtio disk for the block-I/O tests. The checkout is
shared read-only with virtfs (9p) at the same path as on the host, so its ``.venv`` (the host is
Debian bookworm too: same Python, same libc) runs in the VM as it is. Commands go over ssh to a
port on the loopback that QEMU forwards. Its run folder is ``.vm/`` at the repository root.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.support.vm_hang import hang_reason, last_write, threads

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "tests" / "beds" / "vm" / "build.sh"
# The emulated machine: CPUs 0-1 are socket 0's core's two threads (NUMA node 0), 2-3 socket 1's.
SOCKETS, CORES, THREADS = 2, 1, 2
MEMORY_MB = 2048
SCRATCH_DISK = "64M"
BOOT_DEADLINE = 300.0  # s: TCG boots in about a minute; the machine is shared and noisy
CPU_MODEL = "max,vendor=GenuineIntel"  # Intel's topology leaf: the kernel then sees the SMT threads


def shares(extra: tuple[Path, ...] = ()) -> list[Path]:
    """Folders shared read-only into the VM at their own paths: the checkout, the virtual
    environment running this (when it lies outside the checkout) and its interpreter (when it is
    not the system's, e.g. pyenv's), so that the checkout's tests run in the VM as they are;
    then ``extra`` (the VM node's kubelet and CNI plugins, tests/support/vmnode.py)."""
    found: list[Path] = []
    for folder in (REPO, Path(sys.prefix), Path(sys.base_prefix), *extra):
        folder = folder.resolve()
        if folder == Path("/usr") or any(folder.is_relative_to(f) for f in found):
            continue
        found.append(folder)
    return found


class VMError(RuntimeError):
    """The VM could not be built, booted or reached."""


class VMHung(VMError):
    """The VM has neither answered ssh nor written its disks for long: hung, not slow."""


def say(message: str) -> None:
    print(f"vm: {message}", file=sys.stderr, flush=True)


def default_folder() -> Path:
    return Path(os.environ.get("KRE_VM", REPO / ".vm"))


def qemu_command(
    image: Path, run: Path, port: int, extra: tuple[Path, ...] = (), *, nice: bool = False
) -> list[str]:
    """The QEMU command line that boots ``image`` (a build.sh folder) with its state in ``run``
    (``extra``: more folders shared read-only, as ``shares`` says); with ``nice``, at the lowest
    CPU priority (nice 19): it then takes only the CPU time the host's own work leaves idle."""
    cpus = SOCKETS * CORES * THREADS
    per_node = cpus // SOCKETS
    numa: list[str] = []
    for node in range(SOCKETS):
        numa += [
            "-object", f"memory-backend-ram,id=m{node},size={MEMORY_MB // SOCKETS}M",
            "-numa", f"node,nodeid={node},memdev=m{node},"
            f"cpus={node * per_node}-{(node + 1) * per_node - 1}",
        ]  # fmt: skip
    virtfs: list[str] = []
    for i, folder in enumerate(shares(extra)):
        virtfs += [
            "-virtfs",
            f"local,path={folder},mount_tag=kre{i},security_model=none,readonly=on",
        ]
    append = (
        "root=LABEL=kreroot rw console=ttyS0 systemd.unified_cgroup_hierarchy=1 "
        "cgroup_no_v1=all net.ifnames=1 loglevel=5"
    )
    return [
        *(["nice", "-n", "19"] if nice else []),
        "qemu-system-x86_64",
        "-accel", "tcg,thread=multi", "-cpu", CPU_MODEL,
        "-smp", f"{cpus},sockets={SOCKETS},cores={CORES},threads={THREADS}",
        "-m", str(MEMORY_MB), *numa,
        "-kernel", str(image / "vmlinuz"), "-initrd", str(image / "initrd.img"),
        "-append", append,
        "-drive", f"file={run / 'root.qcow2'},if=virtio,format=qcow2,cache=unsafe",
        "-drive", f"file={run / 'scratch.qcow2'},if=virtio,format=qcow2,cache=unsafe",
        "-netdev", f"user,id=n0,hostfwd=tcp:127.0.0.1:{port}-:22",
        "-device", "virtio-net-pci,netdev=n0",
        *virtfs,
        "-display", "none", "-serial", f"file:{run / 'console.log'}",
        "-pidfile", str(run / "qemu.pid"), "-daemonize",
    ]  # fmt: skip


def qemu_of(pid: int, run: Path) -> bool:
    """Whether process ``pid`` is a QEMU booted with its state in ``run`` (a pid file may outlive
    its process and the pid be reused)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return (
        any(a.endswith(b"qemu-system-x86_64") for a in argv)
        and str(run / "qemu.pid").encode() in argv
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ssh's own exit code when it could not run the command (no connection, or one lost).
SSH_FAILED = 255
# How long a command that can run twice is retried while ssh cannot reach the VM (s).
RECONNECT = 300.0


@dataclass
class VM:
    """A booted (or bootable) VM whose run folder is ``run``."""

    run: Path
    image: Path
    port: int

    @classmethod
    def attach(cls, run: Path | None = None) -> VM:
        """The VM that ``up`` recorded in ``run``; VMError when there is none."""
        folder = run or default_folder()
        try:
            rec = json.loads((folder / "vm.json").read_text())
            return cls(folder, Path(rec["image"]), int(rec["port"]))
        except (OSError, ValueError, KeyError) as e:
            raise VMError(f"no VM recorded in {folder} ({e}); run `make vm-up` first") from e

    # -- running commands -------------------------------------------------------------------
    def ssh_command(self, command: str) -> list[str]:
        return [
            "ssh", "-q", "-i", str(self.image / "id_ed25519"), "-p", str(self.port),
            "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
            # A VM at nice 19 beside a busy host can stall for a minute: ssh waits 60 s for the
            # banner and 5 minutes of unanswered keepalives before it gives up.
            "-o", "BatchMode=yes", "-o", "ConnectTimeout=60", "-o", "ServerAliveInterval=15",
            "-o", "ServerAliveCountMax=20",
            "root@127.0.0.1", command,
        ]  # fmt: skip

    def exec(
        self, command: str, *, timeout: float = 600.0, check: bool = False, reconnect: float = 0
    ) -> subprocess.CompletedProcess[str]:
        """Runs ``command`` as root in the VM (a shell command line); output captured. With
        ``reconnect``, a command ssh could not run (exit 255: no connection, or one dropped)
        is run again for that many seconds: only for commands that can run twice."""
        deadline = time.monotonic() + reconnect
        while True:
            done = subprocess.run(
                self.ssh_command(command), capture_output=True, text=True, timeout=timeout
            )
            if done.returncode != SSH_FAILED or time.monotonic() >= deadline:
                break
            time.sleep(5)
        if check and done.returncode != 0:
            raise VMError(
                f"in the VM, `{command}` exited {done.returncode}: "
                f"{(done.stderr or done.stdout).strip()[-2000:]}"
            )
        return done

    def put(self, files: dict[str, tuple[bytes, int]]) -> None:
        """Writes files in the VM (absolute path -> content and mode; folders made), as one
        tar archive over one ssh connection (each costs seconds under emulation)."""
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            for path, (data, mode) in files.items():
                info = tarfile.TarInfo(path.lstrip("/"))
                info.size, info.mode = len(data), mode
                tar.addfile(info, io.BytesIO(data))
        done = subprocess.run(
            self.ssh_command("tar -x -C / -f -"),
            input=buffer.getvalue(),
            capture_output=True,
            timeout=600,
        )
        if done.returncode != 0:
            raise VMError(f"could not write {sorted(files)} in the VM: {done.stderr.decode()}")

    def read(self, path: str) -> str:
        """A file's text in the VM (cgroup and sysfs files)."""
        return self.exec(
            f"cat {shlex.quote(path)}", check=True, timeout=120, reconnect=RECONNECT
        ).stdout

    def run_detached(
        self, command: str, *, timeout: float, poll: float = 10.0, hang_after: float | None = None
    ) -> tuple[int, str]:
        """Runs a long ``command`` in the VM apart from any ssh connection (``setsid``, its
        output to a file) and waits for its end by polling: a dropped connection (a starved VM
        misses ssh's keepalives) costs a poll, not the run. Its exit code and output. With
        ``hang_after``: VMHung once the VM has neither answered ssh nor written its disks for
        that many seconds (tests/support/vm_hang.py)."""
        tag = f"/tmp/kre-detached-{os.getpid()}-{time.monotonic_ns()}"
        inner = f"{{ {command}; }} > {tag}.out 2>&1; echo $? > {tag}.rc"
        # Started once, even when ssh drops after starting it and the launch is run again.
        self.exec(
            f"mkdir {tag}.started 2>/dev/null && "
            f"{{ setsid sh -c {shlex.quote(inner)} < /dev/null > /dev/null 2>&1 & }}; "
            f"test -d {tag}.started",
            check=True,
            timeout=120,
            reconnect=RECONNECT,
        )
        deadline = time.monotonic() + timeout
        last_reply = time.time()
        while time.monotonic() < deadline:
            try:
                probe = self.exec(f"cat {tag}.rc 2>/dev/null", timeout=120)
            except subprocess.TimeoutExpired:  # connected, then no answer: as no connection
                probe = subprocess.CompletedProcess([], SSH_FAILED, "", "")
            if probe.returncode != SSH_FAILED:
                last_reply = time.time()
            if probe.returncode == 0 and probe.stdout.strip().isdigit():
                return int(probe.stdout.strip()), self.read(f"{tag}.out")
            if hang_after is not None:
                why = hang_reason(time.time(), last_reply, last_write(self.run), hang_after)
                if why is not None:
                    pid = self.pid()
                    raise VMHung(f"{why}; QEMU's threads: {threads(pid) if pid else 'none'}")
            time.sleep(poll)
        raise VMError(f"in the VM, `{command}` did not end within {timeout:.0f} s")

    def reachable(self) -> bool:
        try:
            return self.exec("true", timeout=30).returncode == 0
        except subprocess.TimeoutExpired:
            return False

    def pid(self) -> int | None:
        """The running QEMU's pid; None when there is none (a zombie, killed but not yet reaped,
        e.g. where no init reaps orphans, counts as gone)."""
        try:
            pid = int((self.run / "qemu.pid").read_text().strip())
            stat = Path(f"/proc/{pid}/stat").read_text()
        except (OSError, ValueError):
            return None
        return None if stat.rpartition(")")[2].split()[0] == "Z" else pid

    # -- lifecycle ----------------------------------------------------------------------------
    @classmethod
    def up(
        cls, run: Path | None = None, extra_shares: tuple[Path, ...] = (), *, nice: bool = False
    ) -> VM:
        """Builds the image when it is not cached, boots it and waits until ssh answers and the
        checkout (and ``extra_shares``) is mounted. A VM already running from ``run`` is
        reused. ``nice``: QEMU (and the image build) at the lowest CPU priority."""
        folder = run or default_folder()
        if (folder / "vm.json").exists():
            vm = cls.attach(folder)
            if vm.pid() is not None and vm.reachable():
                say(f"already up (ssh port {vm.port})")
                return vm
            vm.down()
        for tool in ("qemu-system-x86_64", "qemu-img", "ssh"):
            if shutil.which(tool) is None:
                raise VMError(f"{tool} is missing; .ci/system-deps.sh installs it (as root)")
        built = subprocess.run(
            [*(["nice", "-n", "19"] if nice else []), str(BUILD)], capture_output=True, text=True
        )
        if built.returncode != 0:
            raise VMError(f"{BUILD} failed: {built.stderr.strip()[-3000:]}")
        image = Path(built.stdout.strip().splitlines()[-1])
        folder.mkdir(parents=True, exist_ok=True)
        for name, backing, size in (
            ("root.qcow2", image / "disk.raw", None),
            ("scratch.qcow2", None, SCRATCH_DISK),
        ):
            args = ["qemu-img", "create", "-q", "-f", "qcow2"]
            if backing is not None:
                args += ["-b", str(backing), "-F", "raw"]
            args += [str(folder / name)] + ([size] if size else [])
            subprocess.run(args, check=True, capture_output=True)
        vm = cls(folder, image, _free_port())
        (folder / "console.log").unlink(missing_ok=True)
        start = time.monotonic()
        booted = subprocess.run(
            qemu_command(image, folder, vm.port, extra_shares, nice=nice),
            capture_output=True,
            text=True,
        )
        if booted.returncode != 0:
            raise VMError(f"qemu did not start: {booted.stderr.strip()}")
        (folder / "vm.json").write_text(json.dumps({"image": str(image), "port": vm.port}))
        deadline = start + BOOT_DEADLINE
        while not vm.reachable():
            if vm.pid() is None:
                raise VMError(f"qemu exited while booting; see {folder / 'console.log'}")
            if time.monotonic() > deadline:
                vm.down()
                raise VMError(f"no ssh after {BOOT_DEADLINE:.0f} s; see {folder / 'console.log'}")
            time.sleep(2)
        for i, folder in enumerate(shares(extra_shares)):
            at = shlex.quote(str(folder))
            vm.exec(
                f"mkdir -p {at} && (mountpoint -q {at} || mount -t 9p -o "
                f"trans=virtio,version=9p2000.L,ro,msize=262144,cache=none kre{i} {at})",
                check=True,
            )
        say(f"up in {time.monotonic() - start:.0f} s (ssh port {vm.port}, checkout at {REPO})")
        return vm

    def kill(self) -> None:
        """Kills a QEMU left running in the run folder (a session killed before its end),
        without the clean poweroff (its disks are thrown away): only a process whose command
        line names this run folder."""
        pid = self.pid()
        if pid is not None and qemu_of(pid, self.run):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 60
            while self.pid() is not None and time.monotonic() < deadline:
                time.sleep(0.2)
        for name in ("root.qcow2", "scratch.qcow2", "vm.json", "qemu.pid"):
            (self.run / name).unlink(missing_ok=True)

    def down(self, *, poweroff: bool = True) -> None:
        """Stops QEMU (a clean poweroff first, unless ``poweroff`` is false: the overlay disk
        goes anyway) and removes the run folder's disks and record."""
        pid = self.pid()
        if pid is not None:
            if poweroff:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.exec("systemctl poweroff", timeout=20)
            deadline = time.monotonic() + (60 if poweroff else 0)
            while self.pid() is not None and time.monotonic() < deadline:
                time.sleep(1)
            if self.pid() is not None:
                os.kill(pid, signal.SIGKILL)
                while self.pid() is not None:
                    time.sleep(0.2)
        for name in ("root.qcow2", "scratch.qcow2", "vm.json", "qemu.pid"):
            (self.run / name).unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.vm")
    parser.add_argument("command", choices=["up", "exec", "down"])
    parser.add_argument("cmd", nargs="?", default="", help="exec: the command line to run")
    parser.add_argument("--dir", type=Path, default=None, help="the run folder (.vm)")
    args = parser.parse_args(argv)
    try:
        if args.command == "up":
            VM.up(args.dir)
        elif args.command == "down":
            if (args.dir or default_folder()).joinpath("vm.json").exists():
                VM.attach(args.dir).down()
        else:
            vm = VM.attach(args.dir)
            return subprocess.run(vm.ssh_command(args.cmd)).returncode
    except VMError as e:
        say(str(e))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
