"""The plugin on NRI of today and of yesterday, on the real runtimes: containerd 2.4.2 (NRI
v0.12.3), containerd 1.7.24 (v0.6.1) and CRI-O 1.34.0 (v0.9.1, a pre-release of it). The
versions are exchanged (each side's log names the other's), 2.4.2 calls the per-event methods
and the plugin serves them (a plugin that answered them unimplemented would get StateChange
again, and a deprecation warning in containerd); 1.7 and CRI-O 1.34 name no version and send
StateChange (the plugin's older path); on each a Guaranteed container gets the exclusive CPU,
which its removal frees for the next one: truth from the containers' cgroups."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from enforcer.cri import api_pb2 as cri
from enforcer.nri.protocol import PLUGIN_NRI_VERSION
from enforcer.topology import CPUSet
from tests.nri.test_nri_static import nri_calls
from tests.support.enforcer_process import free_port
from tests.support.kubelet import KubeletEmulator
from tests.support.nri_enforcer import (
    PER_EVENT_METHOD,
    PER_EVENT_RELEASES,
    NriEnforcerProcess,
    cpus_of,
)
from tests.support.pods import guaranteed, manifest, sleeper
from tests.support.runtimes import NriContainerd, session_runtime

ALL = CPUSet.parse(Path("/sys/fs/cgroup/cpuset/cpuset.cpus").read_text())
RESERVED = CPUSet.of(min(ALL))
EXCLUSIVE = ALL - RESERVED


@pytest.fixture(scope="module", params=("containerd2.4", "containerd1.7", "crio1.34"))
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
    proc = NriEnforcerProcess(
        workdir,
        nri_socket=runtime.nri_socket,
        config=str(config),
        metrics_address=f"127.0.0.1:{free_port()}",
    )
    proc.start()
    try:
        yield proc
    finally:
        assert proc.stop() == 0, proc.log_tail()


def test_versions_events_and_pinning(
    runtime: NriContainerd, plugin: NriEnforcerProcess, tmp_path: Path
) -> None:
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
        # kubelet's update of the container's own resources (UpdateContainer, then
        # PostUpdateContainer): the pinning goes with it.
        kubelet.update_container_resources(
            second.container_id("app"),
            {"cpu_period": 100000, "cpu_quota": 100000, "cpu_shares": 1024},
        )
        assert cpus_of(second) == EXCLUSIVE
        if runtime.release.name in PER_EVENT_RELEASES:
            # kubelet resizes the pod's pod-level resources in place: 2.4 tells the plugin.
            resize = cri.UpdatePodSandboxResourcesRequest(pod_sandbox_id=second.sandbox_id)
            resize.resources.cpu_quota, resize.resources.cpu_period = 200000, 100000
            kubelet.runtime.UpdatePodSandboxResources(resize, timeout=10)
        kubelet.remove_pod(second)
    calls, _ = nri_calls(plugin)
    served = {(method, event) for (method, event, code) in calls if code == "0"}
    state_changes = {event for (method, event) in served if method == "StateChange"}
    containerd_log = runtime.log_path.read_text(errors="replace")
    ours = plugin.log_since_start()
    if runtime.release.name in PER_EVENT_RELEASES:
        # The plugin names its version to the runtime, the runtime its own in Configure.
        assert f"with NRI version {PLUGIN_NRI_VERSION}" in containerd_log
        assert "(NRI v0.12.3)" in ours
        # Every event the plugin takes came as its own call, none as StateChange.
        assert {(m, "") for m in PER_EVENT_METHOD.values()} <= served, served
        assert ("UpdatePodSandbox", "") in served, served
        assert not state_changes, state_changes
    else:
        assert "(NRI version not given (before v0.12))" in ours
        assert set(PER_EVENT_METHOD) <= state_changes, served
        assert not {m for (m, _) in served} & set(PER_EVENT_METHOD.values())
