"""Memory QoS classes and CPU burst on a real cgroup v2 node (the VM's), through the NRI plugin
on the VM's containerd 2.4: a container's memory class written to its real cgroup's
``memory.min``, ``memory.high`` and ``memory.swap.max`` (ratios of its limit, whole pages, as
the kernel keeps them) or ``memory.low`` (a quantity), its scheduling class's ``cpuBurst`` to
``cpu.max.burst``; a value changed behind the plugin's back repaired by its sweep; a container
without a class keeps what the kernel and runc gave it. Truth is the kernel's files, read back."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.kubelet import KubeletEmulator, RunningPod
from tests.support.nri_enforcer import NriEnforcerProcess, wait_for
from tests.support.pods import guaranteed, manifest, sleeper
from tests.support.runtimes import NriContainerd

LIMIT = 64 << 20  # guaranteed()'s memory
PAGE = os.sysconf("SC_PAGE_SIZE")
FILES = ("memory.min", "memory.low", "memory.high", "memory.swap.max", "cpu.max.burst")
DEFAULTS = {
    "memory.min": "0",
    "memory.low": "0",
    "memory.high": "max",
    "memory.swap.max": "max",
    "cpu.max.burst": "0",
}
CONFIG = """\
policy: {name: static, reservedCPUs: "0"}
verify: {periodSeconds: 2}
memoryClasses:
  protected: {min: "50%", high: "90%", swapMax: "0"}
  fixed: {low: "16Mi", swapMax: "max"}
schedulingClasses:
  bursty: {cpuBurst: "500m"}
"""


def pages(n: float) -> str:
    return str(int(n) // PAGE * PAGE)


def qos(pod: RunningPod) -> dict[str, str]:
    """The container's QoS files, read from its real cgroup v2 folder."""
    folder = Path(pod.cgroup_path(None, "app"))
    return {name: (folder / name).read_text().strip() for name in FILES}


@pytest.fixture(scope="module")
def plugin(
    containerd24: NriContainerd, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[NriEnforcerProcess]:
    workdir = tmp_path_factory.mktemp("nri-memory-qos")
    config = workdir / "config.yaml"
    config.write_text(CONFIG)
    proc = NriEnforcerProcess(
        workdir / "enforcer", nri_socket=containerd24.nri_socket, config=str(config)
    )
    proc.start()
    try:
        yield proc
    finally:
        assert proc.stop() == 0, proc.log_tail()


@pytest.fixture
def kubelet(
    containerd24: NriContainerd, plugin: NriEnforcerProcess, tmp_path: Path
) -> Iterator[KubeletEmulator]:
    with KubeletEmulator(containerd24.socket, log_root=tmp_path / "pods") as emu:
        yield emu


def test_memory_and_burst_classes_reach_the_real_cgroup_and_drift_is_repaired(
    plugin: NriEnforcerProcess, kubelet: KubeletEmulator
) -> None:
    classy = kubelet.run_pod(
        manifest(
            "classy",
            sleeper(resources=guaranteed("1")),
            annotations={
                "memoryclass.resource-enforcer.dev/container.app": "protected",
                "schedulingclass.resource-enforcer.dev/container.app": "bursty",
            },
        )
    )
    fixed = kubelet.run_pod(
        manifest(
            "fixed",
            sleeper(resources={"limits": {"memory": "64Mi"}, "requests": {"cpu": "100m"}}),
            annotations={"memoryclass.resource-enforcer.dev/pod": "fixed"},
        )
    )
    plain = kubelet.run_pod(manifest("plain", sleeper(resources=guaranteed("1"))))
    want = {
        **DEFAULTS,
        "memory.min": pages(LIMIT * 0.5),
        "memory.high": pages(LIMIT * 0.9),
        "memory.swap.max": "0",
        "cpu.max.burst": "50000",  # 500m of the 100000 us period
    }
    wait_for(lambda: qos(classy) == want, 60, lambda: f"{qos(classy)}\n{plugin.log_tail()}")
    want_fixed = {**DEFAULTS, "memory.low": str(16 << 20)}
    wait_for(lambda: qos(fixed) == want_fixed, 60, lambda: f"{qos(fixed)}\n{plugin.log_tail()}")
    # Without a class the plugin writes nothing: the kernel's defaults, but for the swap limit
    # runc set from kubelet's (equal to the memory limit: no swap, memory.swap.max 0).
    assert qos(plain) == {**DEFAULTS, "memory.swap.max": "0"}

    # Someone else's writes: the verification sweep puts the class back.
    folder = Path(classy.cgroup_path(None, "app"))
    (folder / "memory.high").write_text("max")
    (folder / "cpu.max.burst").write_text("0")
    wait_for(lambda: qos(classy) == want, 120, lambda: f"{qos(classy)}\n{plugin.log_tail()}")
    for pod in (classy, fixed, plain):
        kubelet.remove_pod(pod)
