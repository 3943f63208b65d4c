"""Both modes, one engine: the same churn of pods (at least 20, seeded) run once through the
relay (`resource-enforcer run` in front of containerd 1.7, no NRI plugin registered) and once
through the NRI plugin (`resource-enforcer nri` on the same containerd) must give the same
placements, read from the real cgroups after every step, and the same refusals. The relay's
half is also the relay's end-to-end run against containerd 1.7."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path

import grpc

from enforcer.topology import CPUSet
from tests.support.cgroupfs import node_cpus
from tests.support.enforcer_process import EnforcerProcess
from tests.support.kubelet import KubeletEmulator, RunningPod
from tests.support.nri_enforcer import NriEnforcerProcess
from tests.support.pods import guaranteed, manifest, sleeper
from tests.support.runtimes import NriContainerd

ALL = node_cpus()
RESERVED = CPUSet.of(min(ALL))
STEPS = 24
NS = "nri-agree"

Snapshot = tuple[tuple[str, str], ...]


def _cpus(pod: RunningPod) -> str:
    try:
        return Path(pod.cgroup_path("cpuset", "app"), "cpuset.cpus").read_text().strip()
    except OSError:
        return "gone"


def _settled(pods: dict[str, RunningPod], quiet: float = 0.4, timeout: float = 8.0) -> Snapshot:
    """The live pods' cpusets once they stop changing (NRI's re-pins after a release follow
    the reply)."""
    deadline = time.monotonic() + timeout
    last = tuple(sorted((name, _cpus(pod)) for name, pod in pods.items()))
    stable_since = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now = tuple(sorted((name, _cpus(pod)) for name, pod in pods.items()))
        if now != last:
            last, stable_since = now, time.monotonic()
        elif time.monotonic() - stable_since >= quiet:
            break
    return last


def _churn(kubelet: KubeletEmulator, seed: int = 13) -> list[tuple[str, Snapshot]]:
    rng = random.Random(seed)
    pods: dict[str, RunningPod] = {}
    record: list[tuple[str, Snapshot]] = []
    made = 0
    for _ in range(STEPS):
        r = rng.random()
        if r < 0.65 or not pods:
            made += 1
            kind = rng.choice(["guaranteed", "guaranteed", "burstable", "besteffort"])
            name = f"{kind[:1]}{made}"
            resources = {
                "guaranteed": guaranteed("1"),
                "burstable": {"requests": {"cpu": "100m"}, "limits": {"cpu": "500m"}},
                "besteffort": None,
            }[kind]
            try:
                pods[name] = kubelet.run_pod(
                    manifest(name, sleeper(resources=resources), namespace=NS)
                )
                what = f"create {name}: ok"
            except grpc.RpcError as exc:
                what = f"create {name}: {exc.code().name}"
        else:
            name = rng.choice(sorted(pods))
            kubelet.remove_pod(pods.pop(name))
            what = f"remove {name}"
        record.append((what, _settled(pods)))
    for pod in list(pods.values()):
        kubelet.remove_pod(pod)
    return record


def _run_mode(start: Callable[[], object], stop: Callable[[], int], socket: str, tmp: Path):
    start()
    try:
        with KubeletEmulator(socket, log_root=tmp / "pods") as kubelet:
            return _churn(kubelet)
    finally:
        assert stop() == 0


def test_nri_and_run_agree_on_placements(nri_containerd: NriContainerd, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f'policy: {{name: static, reservedCPUs: "{RESERVED}"}}\n')

    relay = EnforcerProcess(
        tmp_path / "run", runtime_socket=nri_containerd.socket, config=str(config)
    )
    by_relay = _run_mode(relay.start, relay.stop, relay.relay_socket, tmp_path / "r")

    plugin = NriEnforcerProcess(
        tmp_path / "nri", nri_socket=nri_containerd.nri_socket, config=str(config)
    )
    by_nri = _run_mode(plugin.start, plugin.stop, nri_containerd.socket, tmp_path / "n")

    assert len(by_relay) >= 20
    # The churn really exercised the policy: exclusive CPUs handed out and refused.
    steps = [what for what, _ in by_relay]
    assert any("RESOURCE_EXHAUSTED" in s for s in steps), steps
    assert any(cpus == str(ALL - RESERVED) for _, snap in by_relay for _, cpus in snap)
    for (what_r, snap_r), (what_n, snap_n) in zip(by_relay, by_nri, strict=True):
        assert (what_n, snap_n) == (what_r, snap_r), (
            f"relay: {what_r} -> {snap_r}\nnri:   {what_n} -> {snap_n}\n{plugin.log_tail()}"
        )
