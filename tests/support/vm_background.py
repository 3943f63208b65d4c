"""The cgroup v2 VM's work in the background of the host's pytest session: boot, then the
end-to-end subset in the VM, while the host's tests run (tests/vm waits for it at the end).
The session has one VM: tests/vm/test_vm_dra.py's Kubernetes node (tests.support.vmnode) is
made in it at the end, once the subset has run, so it is booted with the node's programs
(kubelet, the CNI plugins) shared in as well.

Under QEMU's software emulation the VM's boot and its in-VM pytest session take some ten minutes
of CPU; the host's pytest is single-threaded and leaves a core of this 2-core machine mostly
idle. tests/conftest.py starts a ``Background`` as soon as collection has selected a tests/vm
test, with the image build and QEMU at nice 19, so they take only the time the host leaves idle.
tests/vm's fixtures wait for it with generous deadlines (``KRE_TIMEOUT_SCALE`` scaled) and assert
on its JUnit report as before; a background run that could not start or died fails them with its
log, it never skips them.

A killed pytest leaves no QEMU behind: each session's run folder is ``.vm-test/<its pid>/`` in
the checkout, a watchdog shell started before the boot kills the recorded QEMU as soon as the
pytest process is gone, and a session kills any QEMU still recorded in the folder of a session
that is gone before it boots its own (two sessions at once in one checkout keep their own VMs).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.slow import scaled
from tests.support.vm import REPO, VM, VMHung, say
from tests.support.vm_hang import hang_seconds

RUNS = REPO / ".vm-test"
# module -> the cases of it that run in the VM, each on the VM's containerd 2.4 (RUNTIME). Chosen
# for what a cgroup v2 node changes and kept few: every Python start (the enforcer, its CLI) costs
# about a minute under emulation.
SUBSET: dict[str, tuple[str, ...]] = {
    "tests/e2e/test_enforcer_static.py": (
        "test_exclusive_cpu_and_shared_pool_follow_each_other",  # placement, release, widening
        "test_kubelets_update_keeps_the_pinning",  # kubelet's update; memory.max
        "test_containerd_restart_under_the_relay",  # restart
        "test_a_container_gone_behind_the_relays_back_is_released_on_relisting",  # reconcile
        "test_a_cpuset_changed_behind_the_enforcers_back_is_repaired",  # drift on v2 repaired
    ),
    "tests/e2e/test_enforcer_topology_aware.py": (
        "test_exclusive_and_shared_with_memory_pinned",  # 2 NUMA nodes: pools and memory
    ),
    "tests/e2e/test_enforcer_classes.py": ("test_blockio_class_writes_the_real_disks_throttles",),
    "tests/nri/test_nri_static.py": (
        "test_exclusive_cpu_and_shared_pool_follow_each_other",
        "test_kubelets_update_keeps_the_pinning_and_a_resize_that_does_not_fit_is_refused",
    ),
    "tests/nri/test_nri_classes.py": ("test_blockio_class_writes_the_real_disks_throttles",),
}
# Modules that exist for the VM only (tests/vm/inside: not collected on cgroup v1), all cases.
INSIDE = ("tests/vm/inside/test_blockio_v2.py", "tests/vm/inside/test_memory_qos_v2.py")
RUNTIME = "containerd2.4"
TIMEOUT_SCALE = 10
REPORT = "/tmp/kre-vm-junit.xml"
# Deadlines (s, times KRE_TIMEOUT_SCALE): an image build and boot take some 5 minutes here, the
# subset some 9; the host's own work may slow both several times over.
BOOT_WAIT = 3600.0
RUN_WAIT = 2 * 3600.0
# Boots after a hang (tests/support/vm_hang.py) before the run fails with it.
MAX_HANG_REBOOTS = 1


def node_ids() -> list[str]:
    cases = [f"{m}::{name}[{RUNTIME}]" for m, names in SUBSET.items() for name in names]
    return cases + list(INSIDE)


def inside_command() -> str:
    """The in-VM pytest session that runs the subset and writes its JUnit report
    (``KRE_IN_VM``: it starts no VM of its own)."""
    return (
        f"cd {shlex.quote(str(REPO))} && CI=true KRE_IN_VM=1 KRE_TIMEOUT_SCALE={TIMEOUT_SCALE} "
        "PYTHONDONTWRITEBYTECODE=1 .venv/bin/pytest -p no:cacheprovider -q -rfE "
        f"--junitxml={REPORT} {' '.join(shlex.quote(n) for n in node_ids())} 2>&1"
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reap(runs: Path) -> None:
    """Kills the QEMU of every session in ``runs`` whose pytest is gone (killed before its end)
    and removes its folder."""
    if not runs.is_dir():
        return
    for folder in runs.iterdir():
        if folder.is_dir() and folder.name.isdigit() and not _alive(int(folder.name)):
            say(f"killing a VM left running in {folder} by a session that is gone")
            VM(folder, folder, 0).kill()
            shutil.rmtree(folder, ignore_errors=True)


def watchdog(owner: int, run: Path) -> subprocess.Popen[bytes]:
    """A shell that, once process ``owner`` is gone, kills the QEMU recorded in ``run`` (only a
    process that is a QEMU: a pid may be reused). Stopping it is its owner's job."""
    pidfile = shlex.quote(str(run / "qemu.pid"))
    return subprocess.Popen(
        [
            "sh", "-c",
            f"while kill -0 {owner} 2>/dev/null; do sleep 2; done; "
            f"p=$(cat {pidfile} 2>/dev/null) && "
            f"tr '\\0' ' ' </proc/$p/cmdline | grep -q qemu-system && kill -9 $p",
        ],
        start_new_session=True, stdin=subprocess.DEVNULL,
    )  # fmt: skip


@dataclass
class Outcome:
    """What the background run left: the VM (once booted), the node's programs shared into it
    (or why there are none: the cluster build failed), the subset's output and JUnit report
    (once it ran), or the error that ended it, with its traceback."""

    vm: VM | None = None
    bins: dict[str, Path] | None = None
    bins_error: str = ""
    output: str = ""
    report: str | None = None
    error: str = ""
    hangs: list[str] = field(default_factory=list)


@dataclass
class Background:
    """Boots the VM in ``run`` and runs the subset in it, on a thread of the host's pytest."""

    run: Path = field(default_factory=lambda: RUNS / str(os.getpid()))
    outcome: Outcome = field(default_factory=Outcome)
    booted: threading.Event = field(default_factory=threading.Event)
    finished: threading.Event = field(default_factory=threading.Event)
    stopping: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _watchdog: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        reap(self.run.parent)
        self.run.mkdir(parents=True, exist_ok=True)
        self._watchdog = watchdog(os.getpid(), self.run)
        self._thread = threading.Thread(target=self._work, name="kre-vm", daemon=True)
        self._thread.start()

    def _work(self) -> None:
        out = self.outcome
        try:
            start = time.monotonic()
            shared: tuple[Path, ...] = ()
            try:  # cached by `make test` before pytest: only checked here
                # Imported here: the VM's own session (tests/conftest.py) needs none of it.
                from tests.support.cluster.bed import build
                from tests.support.cluster.layout import CNI_BIN_DIR

                out.bins = build()
                shared = (out.bins["kubernetes"], Path(CNI_BIN_DIR))
            except Exception as e:  # the VM node's test fails with it; the subset still runs
                out.bins_error = f"the cluster's programs could not be built: {e}"
            out.vm = VM.up(self.run, shared, nice=True)
            say(f"background: image and boot took {time.monotonic() - start:.0f} s")
            self.booted.set()
            if self.stopping.is_set():  # the session ended while it booted
                raise VMBackgroundError("the session ended before the subset could run")
            start = time.monotonic()
            code, out.output = self._run_subset(shared)
            took = time.monotonic() - start
            say(f"background: the subset's run in the VM ended (exit {code}) in {took:.0f} s")
            out.report = out.vm.read(REPORT)
        except Exception as e:  # any failure is the tests' to report, with its log
            out.error = f"{e}\n{traceback.format_exc()}"
        finally:
            self.booted.set()
            self.finished.set()

    def _run_subset(self, shared: tuple[Path, ...]) -> tuple[int, str]:
        """The subset's exit code and output. Detached from the ssh connection: under a busy
        host the VM (nice 19) can stall past ssh's keepalives, which once ended a whole CI
        run's subset. A VM that hangs (tests/support/vm_hang.py) is booted again and the subset
        run again, once; the hang is told on stderr and kept in ``outcome.hangs``."""
        out = self.outcome
        while True:
            assert out.vm is not None
            try:
                return out.vm.run_detached(
                    inside_command(), timeout=scaled(RUN_WAIT), hang_after=hang_seconds()
                )
            except VMHung as e:
                console = self.run / "console.log"
                tail = console.read_text(errors="replace")[-1500:] if console.exists() else ""
                out.hangs.append(f"{e}; its console's end: {tail or '(none)'}")
                if len(out.hangs) > MAX_HANG_REBOOTS or self.stopping.is_set():
                    raise
                say(f"background: the VM hung ({e}); booting it again for the subset")
                out.vm.down(poweroff=False)
                out.vm = None
                out.vm = VM.up(self.run, shared, nice=True)

    def _log(self) -> str:
        console = self.run / "console.log"
        tail = console.read_text(errors="replace")[-3000:] if console.exists() else "(none)"
        hangs = "".join(f"\nhung, booted again: {h}" for h in self.outcome.hangs)
        return (
            f"{self.outcome.error}{hangs}\nits output:\n{self.outcome.output[-4000:]}\n"
            f"console:\n{tail}"
        )

    def wait_booted(self) -> VM:
        """The booted VM; VMBackgroundError (with the log) when it did not boot in time."""
        if not self.booted.wait(scaled(BOOT_WAIT)):
            raise VMBackgroundError(
                f"the VM did not boot within {scaled(BOOT_WAIT):.0f} s: {self._log()}"
            )
        if self.outcome.vm is None:
            raise VMBackgroundError(f"the VM did not boot: {self._log()}")
        return self.outcome.vm

    def wait_finished(self) -> VM:
        """The booted VM once the subset's run in it has ended (passed or not: the VM is then
        free for the VM node); VMBackgroundError when it did not boot or the run did not end."""
        self.wait_booted()
        if not self.finished.wait(scaled(BOOT_WAIT + RUN_WAIT)):
            raise VMBackgroundError(f"the VM's run did not end; {self._log()}")
        # The VM booted again after a hang, if it was: not the one booted first.
        if self.outcome.vm is None:
            raise VMBackgroundError(f"the VM is gone: {self._log()}")
        return self.outcome.vm

    def wait_report(self) -> tuple[str, str]:
        """The subset's JUnit report and output; VMBackgroundError (with the log) when the run
        did not end in time or ended without a report."""
        self.wait_finished()
        if self.outcome.report is None:
            raise VMBackgroundError(f"no JUnit report from the VM: {self._log()}")
        return self.outcome.report, self.outcome.output

    def close(self) -> None:
        """Stops the VM without a clean poweroff (its disks are thrown away) and the watchdog.
        A boot under way is killed, again and again until the booting thread ends (QEMU may
        start after the first kill); a run under way ends with its VM."""
        self.stopping.set()
        deadline = time.monotonic() + scaled(BOOT_WAIT)
        while True:
            if self.outcome.vm is not None:
                self.outcome.vm.down(poweroff=False)
            else:
                VM(self.run, self.run, 0).kill()
            if self._thread is None or not self._thread.is_alive():
                break
            self._thread.join(timeout=2)
            if time.monotonic() > deadline:
                say(f"background: the VM's thread did not end; its folder {self.run} stays")
                break
        if self.outcome.vm is not None:  # booted while being killed
            self.outcome.vm.down(poweroff=False)
        if self._watchdog is not None:
            self._watchdog.kill()
            self._watchdog.wait()
        if self._thread is None or not self._thread.is_alive():
            shutil.rmtree(self.run, ignore_errors=True)


class VMBackgroundError(RuntimeError):
    """The background VM run did not boot or did not report."""


# Where tests/conftest.py keeps the session's run for tests/vm's fixtures.
BACKGROUND = pytest.StashKey[Background]()
