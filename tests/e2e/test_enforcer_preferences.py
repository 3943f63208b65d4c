"""CPU preferences on the real containerd: `preferenceAccess` refuses a preference the pod's
namespace may not use (PERMISSION_DENIED, naming the key, the namespace and the allowed globs),
and a preserved container's real cpuset never holds another container's exclusive CPU.

Both policies run on this machine (at least 2 CPUs): `static` with the lowest CPU reserved,
`topology-aware` without reserved CPUs (its root keeps one shared CPU, so the other can go
exclusive). The default `preferenceAccess` is in force: `cpu.preserve` only in kube-system."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from enforcer.topology import CPUSet
from tests.support.cgroupfs import node_cpus
from tests.support.checks import cpus_of
from tests.support.containerd import PrivateContainerd
from tests.support.enforcer_process import EnforcerProcess
from tests.support.kubelet import KubeletEmulator, RunningPod
from tests.support.pods import guaranteed, manifest, sleeper

pytestmark = pytest.mark.containerd

ALL = node_cpus()
if len(ALL) < 2:  # pragma: no cover - the suite's machines have 2 CPUs or more
    raise RuntimeError("these tests need at least 2 CPUs")
PRESERVE = "cpu.preserve.resource-enforcer.dev/pod"
CONFIGS = {
    "static": f'policy: {{name: static, reservedCPUs: "{min(ALL)}"}}\n',
    "topology-aware": "policy: {name: topology-aware}\n",
}


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def enforcer(
    request: pytest.FixtureRequest,
    containerd: PrivateContainerd,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[EnforcerProcess]:
    workdir = tmp_path_factory.mktemp(f"preferences-{request.param}")
    config = workdir / "config.yaml"
    config.write_text(CONFIGS[request.param])
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


def allowed_by_the_kernel(kubelet: KubeletEmulator, pod: RunningPod) -> CPUSet:
    """Where the container's processes may run, as the kernel tells the process itself."""
    out = kubelet.exec_sync(pod.container_id("app"), ["cat", "/proc/self/status"])
    line = next(x for x in out.stdout.decode().splitlines() if x.startswith("Cpus_allowed_list"))
    return CPUSet.parse(line.split(":")[1])


def test_preserve_outside_the_reserved_namespaces_is_permission_denied(
    kubelet: KubeletEmulator, enforcer: EnforcerProcess
) -> None:
    with pytest.raises(grpc.RpcError) as err:
        kubelet.run_pod(manifest("tenant", sleeper(), annotations={PRESERVE: "true"}))
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    details = err.value.details()
    assert f'"{PRESERVE}"' in details and 'namespace "e2e"' in details
    assert "allowed namespaces: kube-system" in details
    # Nothing was created for it, and the same pod declining the preference runs.
    names = [c.labels.get("io.kubernetes.pod.name") for c in kubelet.list_containers()]
    assert "tenant" not in names
    kubelet.run_pod(manifest("tenant-ok", sleeper(), annotations={PRESERVE: "false"}))


def test_preserved_container_never_keeps_another_containers_exclusive_cpu(
    kubelet: KubeletEmulator,
) -> None:
    keep = kubelet.run_pod(
        manifest("keep", sleeper(), namespace="kube-system", annotations={PRESERVE: "true"})
    )
    assert cpus_of(keep) == ALL  # kubelet asked for every CPU; nobody holds one yet
    exclusive = kubelet.run_pod(manifest("excl", sleeper(resources=guaranteed("1"))))
    taken = cpus_of(exclusive)
    assert len(taken) == 1
    # Running all along, the preserved container was moved off the CPU that became exclusive.
    assert cpus_of(keep) == ALL - taken
    assert allowed_by_the_kernel(kubelet, keep) == ALL - taken
    # One preserved after the fact never gets it either.
    late = kubelet.run_pod(
        manifest("late", sleeper(), namespace="kube-system", annotations={PRESERVE: "true"})
    )
    assert cpus_of(late) == ALL - taken
    kubelet.remove_pod(exclusive)
    assert cpus_of(keep) == ALL == cpus_of(late)
