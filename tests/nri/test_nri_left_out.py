"""The NRI plugin is never left out for good, on a real containerd 1.7.24: a Synchronize bigger
than ttrpc's 4 MiB (pods with big, legal annotations) after the plugin was killed and started
again is taken, and exclusivity holds throughout; the health file and the DaemonSet's liveness
probe say "not synchronized" while the plugin is left out. Truth is read from the cgroups.

A containerd of this module's own: the big pods stay on it until the module ends."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from enforcer.topology import CPUSet
from tests.support.containerd17 import NriContainerd, containerd17_available
from tests.support.kubelet import KubeletEmulator, RunningPod
from tests.support.nri_enforcer import NriEnforcerProcess
from tests.support.pods import guaranteed, manifest, sleeper

ALL = CPUSet.parse(Path("/sys/fs/cgroup/cpuset/cpuset.cpus").read_text())
RESERVED = CPUSet.of(min(ALL))
NS = "nri-left-out"
# Kubernetes caps all annotations of a pod together at 256 KiB: 230 KiB is legal, and twenty
# such pods make containerd's Synchronize about 4.8 MB, over ttrpc's 4 MiB.
BIG = {"example.com/blob": "x" * (230 << 10)}
BIG_PODS = 20


@pytest.fixture(scope="module")
def ctrd(containerd17: NriContainerd) -> Iterator[NriContainerd]:
    assert containerd17_available() is None
    with NriContainerd() as own:
        yield own


def cpus_of(pod: RunningPod) -> CPUSet:
    return CPUSet.parse(Path(pod.cgroup_path("cpuset", "app"), "cpuset.cpus").read_text())


def wait_for(predicate, timeout: float = 30.0, why=lambda: "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met in time\n{why()}")
        time.sleep(0.1)


def health(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def plugin_process(ctrd: NriContainerd, tmp_path: Path, name: str = "plugin") -> NriEnforcerProcess:
    config = tmp_path / "config.yaml"
    config.write_text(f'policy: {{name: static, reservedCPUs: "{RESERVED}"}}\n')
    health_file = tmp_path / f"{name}.health"
    return NriEnforcerProcess(
        tmp_path / name,
        nri_socket=ctrd.nri_socket,
        config=str(config),
        extra_args=["--health-file", str(health_file)],
    )


def test_an_oversized_synchronize_after_a_restart_is_taken_and_exclusivity_holds(
    ctrd: NriContainerd, tmp_path: Path
) -> None:
    plugin = plugin_process(ctrd, tmp_path)
    health_file = tmp_path / "plugin.health"
    plugin.start()
    try:
        with KubeletEmulator(ctrd.socket, log_root=tmp_path / "pods") as kubelet:
            exclusive = kubelet.run_pod(
                manifest("excl", sleeper(resources=guaranteed("1")), namespace=NS)
            )
            taken = cpus_of(exclusive)
            assert len(taken) == 1 and not taken & RESERVED
            big = [
                kubelet.run_pod(manifest(f"big{i}", sleeper(), namespace=NS, annotations=BIG))
                for i in range(BIG_PODS)
            ]
            wait_for(lambda: all(cpus_of(p) == ALL - taken for p in big), why=plugin.log_tail)

            plugin.kill9()
            plugin.start(wait=False)
            # containerd sends every pod with its annotations in one Synchronize: the plugin
            # takes it, and says so in its health file (what the DaemonSet's probes read).
            wait_for(lambda: health(health_file) == "serving", timeout=60, why=plugin.log_tail)
            assert "exceeds the maximum" not in ctrd.log_tail(400), ctrd.log_tail(40)
            # Nothing moved, and the plugin still knows who holds the exclusive CPU.
            assert cpus_of(exclusive) == taken
            assert all(cpus_of(p) == ALL - taken for p in big)

            # Registered: new containers are adjusted. The exclusive CPU freed, a new
            # Guaranteed pod gets it, and a Burstable one does not run on it.
            kubelet.remove_pod(exclusive)
            wait_for(lambda: all(cpus_of(p) == ALL for p in big), why=plugin.log_tail)
            again = kubelet.run_pod(
                manifest("again", sleeper(resources=guaranteed("1")), namespace=NS)
            )
            mine = cpus_of(again)
            assert len(mine) == 1 and not mine & RESERVED
            burstable = kubelet.run_pod(
                manifest("burst", sleeper(resources={"requests": {"cpu": "100m"}}), namespace=NS)
            )
            assert cpus_of(burstable) == ALL - mine
            wait_for(lambda: all(cpus_of(p) == ALL - mine for p in big), why=plugin.log_tail)
    finally:
        plugin.stop()


def liveness_command() -> list[str]:
    """The DaemonSet's liveness probe of deploy/nri, as rendered by kustomize's patch."""
    import yaml

    root = Path(__file__).resolve().parents[2]
    patch = yaml.safe_load((root / "deploy" / "nri" / "daemonset-nri.yaml").read_text())
    (container,) = patch["spec"]["template"]["spec"]["containers"]
    return list(container["livenessProbe"]["exec"]["command"])


def probe(command: list[str], health_file: Path) -> int:
    """Runs the probe's command with the pod's health file path replaced by ours."""
    args = [a.replace("/tmp/enforcer.health", str(health_file)) for a in command]
    if args[0] == "python":
        args[0] = "python3"
    return subprocess.run(args, capture_output=True, timeout=30).returncode
