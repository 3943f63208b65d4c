"""Fail-closed NRI on containerd 2.4.2: NRI's default validator with our plugin in
``required_plugins``, configured as docs/nri.md tells an operator. While the plugin is down no
container of a pod that needs it is created (CreateContainer is refused by the validator,
kubelet retries); a pod that tolerates the missing plugin by annotation (as the plugin's own pod
must) starts; once the plugin is back, kubelet's retries create every container, pinned. Truth
from the containers' cgroups (and their absence)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from enforcer.topology import CPUSet
from tests.support.containerd import ContainerdError
from tests.support.kubelet import KubeletEmulator, RunningPod
from tests.support.nri_enforcer import NriEnforcerProcess, cpus_of, wait_for
from tests.support.pods import guaranteed, manifest, sleeper
from tests.support.runtimes import TOLERATE_MISSING, NriContainerd

ALL = CPUSet.parse(Path("/sys/fs/cgroup/cpuset/cpuset.cpus").read_text())
RESERVED = CPUSet.of(min(ALL))
EXCLUSIVE = ALL - RESERVED
PLUGIN = "resource-enforcer"


@pytest.fixture
def containerd24_fail_closed(tmp_path: Path) -> Iterator[NriContainerd]:
    runtime = NriContainerd(
        tmp_path / "containerd", release="containerd2.4", required_plugins=(PLUGIN,)
    )
    reason = runtime.unavailable()
    if reason:
        pytest.fail(f"containerd 2.4 is needed: {reason}", pytrace=False)
    try:
        runtime.start()
    except ContainerdError as e:
        runtime.close()
        pytest.fail(f"containerd 2.4 did not start: {e}", pytrace=False)
    try:
        yield runtime
    finally:
        runtime.close()


def containers_in_cgroup(pod: RunningPod) -> set[str]:
    """The containers that have a cpuset cgroup in the pod's (the sandbox's included)."""
    folder = Path("/sys/fs/cgroup/cpuset", pod.cgroup_parent.lstrip("/"))
    return {p.name for p in folder.iterdir() if p.is_dir()} if folder.is_dir() else set()


def test_while_the_plugin_is_down_no_container_starts_and_all_start_pinned_when_it_is_back(
    containerd24_fail_closed: NriContainerd, tmp_path: Path
) -> None:
    runtime = containerd24_fail_closed
    config = tmp_path / "config.yaml"
    config.write_text(f'policy: {{name: static, reservedCPUs: "{RESERVED}"}}\n')
    plugin = NriEnforcerProcess(
        tmp_path / "plugin", nri_socket=runtime.nri_socket, config=str(config)
    )
    plugin.start()
    try:
        with KubeletEmulator(runtime.socket, log_root=tmp_path / "pods") as kubelet:
            _down_then_back(runtime, plugin, kubelet)
    finally:
        if plugin.proc is not None and plugin.proc.poll() is None:
            assert plugin.stop() == 0, plugin.log_tail()


def _down_then_back(
    runtime: NriContainerd, plugin: NriEnforcerProcess, kubelet: KubeletEmulator
) -> None:
    # The plugin dies (a crash, an update of its DaemonSet): containerd sees the close at once.
    plugin.kill9()
    # (containerd drops a closed plugin at the end of its next NRI request: here the
    # RunPodSandbox below. docs/nri.md: a CreateContainer that is that first request passes.)
    g = kubelet.run_pod_sandbox(
        manifest("fc-g", sleeper(resources=guaranteed("1")), namespace="fail-closed")
    )
    be = kubelet.run_pod_sandbox(manifest("fc-be", sleeper(), namespace="fail-closed"))
    refused: dict[str, str] = {}
    for pod in (g, be):
        for _attempt in range(2):  # kubelet retries: refused each time
            with pytest.raises(grpc.RpcError) as error:
                kubelet.create_container(pod, "app")
            refused[pod.name] = error.value.details() or ""
        # Nothing was created: no container of the pod but its sandbox, in the runtime and
        # in the cgroups.
        assert containers_in_cgroup(pod) <= {pod.sandbox_id}, containers_in_cgroup(pod)
        assert not pod.containers
    for message in refused.values():
        assert f'required plugin "{PLUGIN}" not present' in message, refused
    # The plugin's own pod (and static pods) tolerate its absence by annotation: it starts.
    tolerant = kubelet.run_pod(
        manifest(
            "fc-tolerant",
            sleeper(),
            namespace="fail-closed",
            annotations={TOLERATE_MISSING: "true"},
        )
    )
    assert cpus_of(tolerant) == ALL  # nobody pinned it

    # The plugin is back: kubelet's next retries create and start both, pinned.
    plugin.start()
    for pod in (g, be):
        kubelet.start_container(kubelet.create_container(pod, "app"))
    assert cpus_of(g) == EXCLUSIVE
    assert cpus_of(be) == RESERVED
    # The container that started meanwhile is moved off the exclusive CPU by the Synchronize.
    wait_for(lambda: cpus_of(tolerant) == RESERVED, why=plugin.log_tail)
    for pod in (g, be, tolerant):
        kubelet.remove_pod(pod)
