"""A preserved container under `topology-aware` with a reserved CPU, on the real containerd:
when exclusive containers take every shared CPU of the root (allowed with reserved CPUs), the
preserved container's real cpuset is the reserved CPU, as for BestEffort containers, and never
holds another container's exclusive CPU.

The pods run in `e2e`, outside `reservedNamespaces`, so they are not entitled to the reserved
CPU on their own (`preferenceAccess` lets them use `cpu.preserve`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from enforcer.topology import CPUSet
from tests.support.cgroupfs import node_cpus
from tests.support.checks import cpus_of
from tests.support.containerd import PrivateContainerd
from tests.support.enforcer_process import EnforcerProcess
from tests.support.kubelet import KubeletEmulator
from tests.support.pods import guaranteed, manifest, sleeper

pytestmark = pytest.mark.containerd

ALL = node_cpus()
if len(ALL) < 2:  # pragma: no cover - the suite's machines have 2 CPUs or more
    raise RuntimeError("these tests need at least 2 CPUs")
RESERVED = CPUSet.of(min(ALL))
PRESERVE = "cpu.preserve.resource-enforcer.dev/pod"
CONFIG = (
    f'policy: {{name: topology-aware, reservedCPUs: "{RESERVED}"}}\n'
    'preferenceAccess: {"cpu.preserve": ["e2e"]}\n'
)


@pytest.fixture(scope="module")
def enforcer(
    containerd: PrivateContainerd, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EnforcerProcess]:
    workdir = tmp_path_factory.mktemp("preserve-fallback")
    config = workdir / "config.yaml"
    config.write_text(CONFIG)
    proc = EnforcerProcess(workdir, runtime_socket=containerd.socket, config=str(config))
    proc.start()
    try:
        yield proc
    finally:
        assert proc.stop() == 0, proc.log_tail()


@pytest.fixture
def kubelet(enforcer: EnforcerProcess, tmp_path: Path) -> Iterator[KubeletEmulator]:
    with KubeletEmulator(enforcer.relay_socket, log_root=tmp_path / "pods") as emu:
        yield emu


def test_preserved_container_falls_back_to_the_reserved_cpu_never_an_exclusive_one(
    kubelet: KubeletEmulator,
) -> None:
    keep = kubelet.run_pod(manifest("keep", sleeper(), annotations={PRESERVE: "true"}))
    assert cpus_of(keep) == ALL - RESERVED  # kubelet asked for every CPU: the shared ones
    # Every CPU but the reserved one goes exclusive.
    whole = str(len(ALL - RESERVED))
    exclusive = kubelet.run_pod(manifest("excl", sleeper(resources=guaranteed(whole))))
    taken = cpus_of(exclusive)
    assert taken == ALL - RESERVED
    # Running all along, the preserved container was moved to the reserved CPU.
    assert cpus_of(keep) == RESERVED
    kubelet.remove_pod(exclusive)
    assert cpus_of(keep) == ALL - RESERVED
