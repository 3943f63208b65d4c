"""`resource-enforcer nri` end to end: kubelet emulator -> a private containerd 1.7 with NRI
-> the plugin (console script), with the static policy on this 2-CPU machine (CPU 0 reserved,
CPU 1 the one exclusive CPU). Every assertion reads the real cgroup files."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from enforcer.metrics import NRI_EVENTS, NRI_METHODS
from enforcer.topology import CPUSet
from tests.support.cgroupfs import memory_limit, node_cpus
from tests.support.checks import cpus_of, wait_for
from tests.support.enforcer_process import free_port
from tests.support.kubelet import KubeletEmulator
from tests.support.nri_enforcer import PER_EVENT_METHOD, PER_EVENT_RELEASES, NriEnforcerProcess
from tests.support.pods import guaranteed, manifest, sleeper
from tests.support.runtimes import NriContainerd

ALL = node_cpus()
RESERVED = CPUSet.of(min(ALL))


@pytest.fixture(scope="module")
def plugin(
    nri_containerd: NriContainerd, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[NriEnforcerProcess]:
    workdir = tmp_path_factory.mktemp("nri-static")
    config = workdir / "config.yaml"
    # A quick periodic read-back: a cpuset changed behind the plugin's back is repaired soon.
    config.write_text(
        f'policy: {{name: static, reservedCPUs: "{RESERVED}"}}\nverify: {{periodSeconds: 1}}\n'
    )
    proc = NriEnforcerProcess(
        workdir,
        nri_socket=nri_containerd.nri_socket,
        config=str(config),
        metrics_address=f"127.0.0.1:{free_port()}",
    )
    proc.start()
    try:
        yield proc
    finally:
        code = proc.stop()
        assert code == 0, f"SIGTERM should stop the plugin cleanly:\n{proc.log_tail()}"


@pytest.fixture
def kubelet(
    nri_containerd: NriContainerd, plugin: NriEnforcerProcess, tmp_path: Path
) -> Iterator[KubeletEmulator]:
    with KubeletEmulator(nri_containerd.socket, log_root=tmp_path / "pods") as emu:
        yield emu


def test_exclusive_cpu_and_shared_pool_follow_each_other(
    kubelet: KubeletEmulator, plugin: NriEnforcerProcess
) -> None:
    shared = kubelet.run_pod(manifest("be", sleeper(), namespace="nri-e2e"))
    assert cpus_of(shared) == ALL
    exclusive = kubelet.run_pod(
        manifest("g1", sleeper(resources=guaranteed("1")), namespace="nri-e2e")
    )
    taken = cpus_of(exclusive)
    assert len(taken) == 1 and not taken & RESERVED, plugin.log_tail()
    # The BestEffort container, running all along, was moved off the exclusive CPU by the
    # update in the CreateContainer response, before the exclusive one started.
    assert cpus_of(shared) == ALL - taken
    out = kubelet.exec_sync(shared.container_id("app"), ["cat", "/proc/self/status"])
    allowed = [line for line in out.stdout.decode().splitlines() if "Cpus_allowed_list" in line]
    assert CPUSet.parse(allowed[0].split(":")[1]) == ALL - taken
    # Released: the shared container widens again (an update in the StopContainer answer).
    kubelet.remove_pod(exclusive)
    wait_for(lambda: cpus_of(shared) == ALL, why=plugin.log_tail)


def test_refused_when_no_cpu_is_free(
    kubelet: KubeletEmulator, plugin: NriEnforcerProcess, nri_containerd: NriContainerd
) -> None:
    first = kubelet.run_pod(
        manifest("g-a", sleeper(resources=guaranteed("1")), namespace="nri-e2e")
    )
    assert len(cpus_of(first)) == 1
    with pytest.raises(grpc.RpcError) as refused:
        kubelet.run_pod(manifest("g-b", sleeper(resources=guaranteed("1")), namespace="nri"))
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, refused.value.details()
    if not nri_containerd.release.crio:  # CRI-O hands on the plugin's message as it is
        assert "failed to get NRI adjustment" in refused.value.details()
    kubelet.remove_pod(first)
    # Freed: the same pod now fits.
    again = kubelet.run_pod(
        manifest("g-b", sleeper(resources=guaranteed("1")), namespace="nri-e2e")
    )
    assert len(cpus_of(again)) == 1


def test_kubelets_update_keeps_the_pinning_and_a_resize_that_does_not_fit_is_refused(
    kubelet: KubeletEmulator, plugin: NriEnforcerProcess
) -> None:
    pod = kubelet.run_pod(manifest("upd", sleeper(resources=guaranteed("1")), namespace="nri"))
    pinned = cpus_of(pod)
    assert len(pinned) == 1
    # kubelet's update (new memory limit, its own cpuset): our pinning goes with it.
    kubelet.update_container_resources(
        pod.container_id("app"),
        {"cpu_period": 100000, "cpu_quota": 100000, "cpu_shares": 1024,
         "memory_limit_in_bytes": 128 << 20, "cpuset_cpus": str(ALL)},
    )  # fmt: skip
    assert cpus_of(pod) == pinned
    assert memory_limit(pod.cgroup_path("memory", "app")) == 128 << 20
    # An in-place resize to one exclusive CPU more than the machine has unreserved.
    more = len(ALL - RESERVED) + 1
    with pytest.raises(grpc.RpcError) as resize:
        kubelet.update_container_resources(
            pod.container_id("app"),
            {"cpu_period": 100000, "cpu_quota": more * 100000, "cpu_shares": more * 1024,
             "memory_limit_in_bytes": 128 << 20},
        )  # fmt: skip
    assert "resize refused" in resize.value.details(), resize.value.details()
    assert cpus_of(pod) == pinned
    kubelet.remove_pod(pod)


def test_status_reads_the_plugins_state(
    kubelet: KubeletEmulator, plugin: NriEnforcerProcess
) -> None:
    pod = kubelet.run_pod(manifest("shown", sleeper(resources=guaranteed("1")), namespace="nri"))

    def rows() -> list[dict]:
        out = plugin.run_cli("status", "--state-dir", plugin.state_dir, "--output", "json")
        assert out.returncode == 0, out.stderr
        return [c for c in json.loads(out.stdout)["containers"] if c["pod"] == "shown"]

    wait_for(lambda: bool(rows()) and rows()[0]["containerID"], why=plugin.log_tail)
    [row] = rows()
    assert (row["namespace"], row["qos"], row["kind"]) == ("nri", "Guaranteed", "exclusive")
    assert row["containerID"] == pod.container_id("app")
    assert row["cpus"] == str(cpus_of(pod))
    kubelet.remove_pod(pod)


Calls = dict[tuple[str, str, str], float]


def nri_calls(plugin: NriEnforcerProcess) -> tuple[Calls, Calls]:
    """(method, event, code) -> calls, and (method, event, "") -> answer times observed, from
    the plugin's /metrics."""
    with urllib.request.urlopen(plugin.metrics_url + "/metrics", timeout=5) as response:
        text = response.read().decode()
    calls: Calls = {}
    observed: Calls = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if sample.name == "resource_enforcer_nri_calls_total":
                calls[(labels["method"], labels["event"], labels["code"])] = sample.value
            elif sample.name == "resource_enforcer_nri_call_seconds_count":
                observed[(labels["method"], labels["event"], "")] = sample.value
    return calls, observed


def test_metrics_count_the_runtimes_requests_and_our_updates(
    kubelet: KubeletEmulator, plugin: NriEnforcerProcess, nri_containerd: NriContainerd
) -> None:
    before, _ = nri_calls(plugin)
    # NRI v0.12 (containerd 2.4) calls a method per event; older runtimes send StateChange.
    per_event = nri_containerd.release.name in PER_EVENT_RELEASES

    def as_event(name: str) -> tuple[str, str]:
        return (PER_EVENT_METHOD[name], "") if per_event else ("StateChange", name)

    def grew(method: str, event: str = "", code: str = "0") -> float:
        now, _ = nri_calls(plugin)
        key = (method, event, code)
        return now.get(key, 0) - before.get(key, 0)

    shared = kubelet.run_pod(manifest("m-be", sleeper(), namespace="nri-e2e"))
    exclusive = kubelet.run_pod(
        manifest("m-g1", sleeper(resources=guaranteed("1")), namespace="nri-e2e")
    )
    with pytest.raises(grpc.RpcError) as refused:
        kubelet.run_pod(manifest("m-g2", sleeper(resources=guaranteed("1")), namespace="nri"))
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    # Someone widens the shared container onto the exclusive CPU: the periodic read-back
    # repairs it with an UpdateContainers of the plugin's own (no event of the runtime's).
    taken = cpus_of(exclusive)
    Path(shared.cgroup_path("cpuset", "app"), "cpuset.cpus").write_text(str(ALL))
    wait_for(lambda: cpus_of(shared) == ALL - taken, why=plugin.log_tail)
    wait_for(lambda: grew("UpdateContainers") >= 1, why=plugin.log_tail)
    kubelet.remove_pod(exclusive)
    wait_for(lambda: cpus_of(shared) == ALL, why=plugin.log_tail)

    assert grew("CreateContainer") == 2
    assert grew("CreateContainer", code="8") == 1  # RESOURCE_EXHAUSTED, as the runtime got it
    assert grew(*as_event("RUN_POD_SANDBOX")) >= 3
    assert grew(*as_event("START_CONTAINER")) == 2
    assert grew("StopContainer") >= 1
    assert grew(*as_event("REMOVE_CONTAINER")) >= 1
    assert grew(*as_event("STOP_POD_SANDBOX")) >= 1
    assert grew(*as_event("REMOVE_POD_SANDBOX")) >= 1
    calls, observed = nri_calls(plugin)
    # Registration: configured and synchronized once at least (since the plugin started).
    assert calls[("Configure", "", "0")] >= 1 and calls[("Synchronize", "", "0")] >= 1
    # Every call has its answer time observed, and every label value is from the fixed lists.
    for method, event, _code in calls:
        assert method in NRI_METHODS, method
        assert event in NRI_EVENTS if method == "StateChange" else event == "", (method, event)
    assert sum(v for (m, _, _), v in calls.items() if m == "CreateContainer") == sum(
        v for (m, _, _), v in observed.items() if m == "CreateContainer"
    )
    assert observed[(*as_event("START_CONTAINER"), "")] >= 2
