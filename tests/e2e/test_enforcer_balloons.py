"""The balloons policy on the real containerd: a balloon inflating and deflating re-pins the
running containers it touches, read back from their real cgroups.

This machine has two CPUs and the balloons policy needs a reserved one, so the balloon that
inflates goes from 0 CPUs (kept by minBalloons) to 1 and back; the container that sees it move
is a preserved one (`cpu.preserve`), which runs on the CPUs in no balloon and the reserved ones.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from enforcer.topology import CPUSet
from tests.support.cgroupfs import node_cpus
from tests.support.containerd import PrivateContainerd
from tests.support.enforcer_process import EnforcerProcess
from tests.support.kubelet import KubeletEmulator, RunningPod
from tests.support.pods import manifest, sleeper

pytestmark = pytest.mark.containerd

ALL = node_cpus()
RESERVED, SPARE = sorted(ALL)[:2]


@pytest.fixture
def relay(containerd: PrivateContainerd, tmp_path: Path) -> Iterator[EnforcerProcess]:
    config = tmp_path / "config.yaml"
    config.write_text(
        f'policy:\n  name: balloons\n  availableCPUs: "{RESERVED},{SPARE}"\n'
        f'  reservedCPUs: "{RESERVED}"\n'
        "  balloonTypes:\n"
        "    - {name: inference, namespaces: [ai], minBalloons: 1, maxBalloons: 1}\n"
        "    - {name: default, maxCPUs: 1}\n"
    )
    proc = EnforcerProcess(tmp_path, runtime_socket=containerd.socket, config=str(config))
    proc.start()
    try:
        yield proc
    finally:
        assert proc.stop() == 0, proc.log_tail()


def cpus(pod: RunningPod, container: str = "app") -> CPUSet:
    return CPUSet.parse(Path(pod.cgroup_path("cpuset", container), "cpuset.cpus").read_text())


def test_inflate_and_deflate_repin_running_containers(
    relay: EnforcerProcess, tmp_path: Path
) -> None:
    with KubeletEmulator(relay.relay_socket, log_root=tmp_path / "pods") as kubelet:
        keeper = kubelet.run_pod(
            manifest(
                "keeper",
                sleeper(),
                namespace="kube-system",
                annotations={"cpu.preserve.resource-enforcer.dev/pod": "true"},
            )
        )
        # inference[0] exists from the start with no CPU: the spare CPU is idle.
        assert cpus(keeper) == CPUSet.of(RESERVED, SPARE)
        model = kubelet.run_pod(
            manifest("model", sleeper(resources={"requests": {"cpu": "500m"}}), namespace="ai")
        )
        # inference[0] inflated to 1 CPU: the model runs there, the keeper was moved off it.
        assert cpus(model) == CPUSet.of(SPARE)
        assert cpus(keeper) == CPUSet.of(RESERVED)
        status = json.loads(
            relay.run_cli("status", "--state-dir", relay.state_dir, "--output", "json").stdout
        )
        balloon = next(b for b in status["balloons"] if b["name"] == "inference[0]")
        assert balloon["cpus"] == str(SPARE) and balloon["containers"] == ["ai/model/app"]
        # A second container of the type would need a second CPU: refused, naming the type.
        with pytest.raises(Exception, match="balloon type inference"):
            kubelet.run_pod(
                manifest("big", sleeper(resources={"requests": {"cpu": "1500m"}}), namespace="ai")
            )
        kubelet.remove_pod(model)
        # Deflated back to no CPU (minBalloons keeps the balloon): the keeper has it again.
        assert cpus(keeper) == CPUSet.of(RESERVED, SPARE)
