"""The plugin on NRI of today and of yesterday, on the real runtimes: containerd 2.4.2 (NRI
v0.12.3) and containerd 1.7.24 (v0.6.1). The versions are exchanged (each side's log names the
other's), 2.4.2 calls the per-event methods (it logs a deprecation for a plugin that leaves
an event to StateChange: none here), and on both a Guaranteed container gets the exclusive CPU,
which its removal frees for the next one: truth from the containers' cgroups."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from enforcer.nri.protocol import PLUGIN_NRI_VERSION
from enforcer.topology import CPUSet
from tests.support.kubelet import KubeletEmulator
from tests.support.nri_enforcer import NriEnforcerProcess, cpus_of
from tests.support.pods import guaranteed, manifest, sleeper
from tests.support.runtimes import NriContainerd, session_runtime

ALL = CPUSet.parse(Path("/sys/fs/cgroup/cpuset/cpuset.cpus").read_text())
RESERVED = CPUSet.of(min(ALL))
EXCLUSIVE = ALL - RESERVED
DEPRECATED = "uses deprecated StateChange"


@pytest.fixture(scope="module", params=("containerd2.4", "containerd1.7"))
def runtime(request: pytest.FixtureRequest) -> NriContainerd:
    found = session_runtime(request, request.param)
    assert isinstance(found, NriContainerd)
    return found


@pytest.fixture(scope="module")
def plugin(
    runtime: NriContainerd, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[NriEnforcerProcess]:
    workdir = tmp_path_factory.mktemp("nri-today")
    config = workdir / "config.yaml"
    config.write_text(f'policy: {{name: static, reservedCPUs: "{RESERVED}"}}\n')
    proc = NriEnforcerProcess(workdir, nri_socket=runtime.nri_socket, config=str(config))
    proc.start()
    try:
        yield proc
    finally:
        assert proc.stop() == 0, proc.log_tail()


def test_versions_events_and_pinning(
    runtime: NriContainerd, plugin: NriEnforcerProcess, tmp_path: Path
) -> None:
    log_start = runtime.log_path.stat().st_size
    with KubeletEmulator(runtime.socket, log_root=tmp_path / "pods") as kubelet:
        first = kubelet.run_pod(
            manifest("g1", sleeper(resources=guaranteed("1")), namespace="nri-today")
        )
        assert cpus_of(first) == EXCLUSIVE
        kubelet.remove_pod(first)
        second = kubelet.run_pod(
            manifest("g2", sleeper(resources=guaranteed("1")), namespace="nri-today")
        )
        # Released by the removal (RemoveContainer / RemovePodSandbox, or their StateChange).
        assert cpus_of(second) == EXCLUSIVE
        kubelet.remove_pod(second)
    containerd_log = runtime.log_path.read_text(errors="replace")
    ours = plugin.log_since_start()
    if runtime.release.name == "containerd2.4":
        # The plugin names its version; the runtime names its own in Configure.
        assert f"with NRI version {PLUGIN_NRI_VERSION}" in containerd_log
        assert "(NRI v0.12.3)" in ours
        # Every event the plugin takes came as its own call.
        assert DEPRECATED not in containerd_log[log_start:], containerd_log[log_start:][-3000:]
    else:
        assert "(NRI version not given (before v0.12))" in ours
