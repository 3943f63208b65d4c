"""Configuration from the cluster, end to end: `resource-enforcer run` (console script) in front
of the private containerd, the real `kubernetes` client inside it talking to the fake API
server, kubelet's calls from the emulator. Every CPU assertion reads the real cgroup files.

On this machine (2 CPUs or more) the default ConfigMap sets the static policy with CPU 0
reserved, so a Guaranteed 1-CPU container gets an exclusive CPU; with policy `none`
(no configuration at all) it would not.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from enforcer.cluster import STATUS_ANNOTATION
from enforcer.cri import api_pb2, api_pb2_grpc
from enforcer.topology import CPUSet
from tests.support.containerd import PrivateContainerd
from tests.support.enforcer_process import EnforcerProcess, free_port
from tests.support.fake_apiserver import FakeAPIServer
from tests.support.kubelet import KubeletEmulator, RunningPod
from tests.support.pods import guaranteed, manifest, sleeper

pytestmark = pytest.mark.containerd

NS = "resource-enforcer"
NODE = "e2e-node"
DEFAULT_CM = "resource-enforcer-config.default"
NODE_CM = f"resource-enforcer-config.node.{NODE}"
ALL = CPUSet.parse(Path("/sys/fs/cgroup/cpuset/cpuset.cpus").read_text())
RESERVED = CPUSet.of(min(ALL))
STATIC = {"config.yaml": f'policy: {{name: static, reservedCPUs: "{RESERVED}"}}\n'}


def wait_for(predicate: Callable[[], object], timeout: float = 15.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or predicate}")
        time.sleep(0.05)


def cpus_of(pod: RunningPod, container: str = "app") -> CPUSet:
    return CPUSet.parse(Path(pod.cgroup_path("cpuset", container), "cpuset.cpus").read_text())


def node_status(api: FakeAPIServer) -> dict[str, object]:
    raw = api.annotation(NODE, STATUS_ANNOTATION)
    return json.loads(raw) if raw else {}


def wait_status(api: FakeAPIServer, what: str = "", **expect: object) -> dict[str, object]:
    wait_for(lambda: expect.items() <= node_status(api).items(), what=what or f"{expect}")
    return node_status(api)


def scrape(enforcer: EnforcerProcess, path: str = "/metrics") -> str:
    with urllib.request.urlopen(enforcer.metrics_url + path, timeout=5) as resp:
        return resp.read().decode()


def healthy(enforcer: EnforcerProcess) -> bool:
    try:
        return scrape(enforcer, "/healthz") == "ok\n"
    except OSError:
        return False


def sample(text: str, name: str, **labels: str) -> float:
    """The value of one Prometheus sample (0 when absent)."""
    for line in text.splitlines():
        m = re.fullmatch(r"([a-z_]+)(?:\{(.*)\})? (\S+)", line)
        if not m or m.group(1) != name:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        if found == labels:
            return float(m.group(3))
    return 0.0


@pytest.fixture
def api() -> Iterator[FakeAPIServer]:
    server = FakeAPIServer().start()
    server.put_node(NODE)
    yield server
    server.stop()


@pytest.fixture
def make_enforcer(
    containerd: PrivateContainerd, api: FakeAPIServer, tmp_path: Path
) -> Iterator[Callable[..., EnforcerProcess]]:
    kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
    started: list[EnforcerProcess] = []

    def make(workdir: Path | None = None, *, metrics: bool = False) -> EnforcerProcess:
        proc = EnforcerProcess(
            workdir or tmp_path / "enforcer",
            runtime_socket=containerd.socket,
            metrics_address=f"127.0.0.1:{free_port()}" if metrics else "",
            extra_args=[
                *("--cluster-config", "on", "--node-name", NODE, "--namespace", NS),
                *("--kubeconfig", kubeconfig),
            ],
        )
        started.append(proc)
        return proc

    yield make
    for proc in started:
        code = proc.stop()
        assert code == 0, f"SIGTERM should stop the enforcer cleanly:\n{proc.log_tail()}"


@pytest.fixture
def kubelet_for(tmp_path: Path) -> Iterator[Callable[[EnforcerProcess], KubeletEmulator]]:
    emulators: list[KubeletEmulator] = []

    def make(enforcer: EnforcerProcess) -> KubeletEmulator:
        emu = KubeletEmulator(enforcer.relay_socket, log_root=tmp_path / "pods")
        emulators.append(emu)
        return emu

    yield make
    for emu in emulators:
        emu.close()


def status_cli(enforcer: EnforcerProcess) -> str:
    out = enforcer.run_cli("status", "--state-dir", enforcer.state_dir)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_api_server_down_at_start_then_back(
    api: FakeAPIServer,
    make_enforcer: Callable[..., EnforcerProcess],
    kubelet_for: Callable[[EnforcerProcess], KubeletEmulator],
) -> None:
    # A first run learns the cluster's configuration and keeps it in the state folder.
    cm = api.put_configmap(NS, DEFAULT_CM, STATIC)
    enforcer = make_enforcer().start()
    wait_status(api, applied=True, resourceVersion=cm["metadata"]["resourceVersion"])
    assert enforcer.stop() == 0
    stored = json.loads(Path(enforcer.state_dir, "config.last-good.json").read_text())
    assert stored["source"] == f"configmap/{NS}/{DEFAULT_CM}"
    assert stored["config"] == STATIC["config.yaml"]

    # The control plane is away (a reboot of a one-node cluster, say): the relay serves at
    # once, with the stored configuration.
    api.stop()
    started = time.monotonic()
    enforcer.start()
    assert time.monotonic() - started < 10
    assert "configuration: configmap/resource-enforcer/resource-enforcer-config.default" in (
        enforcer.log_tail()
    )
    kubelet = kubelet_for(enforcer)
    pod = kubelet.run_pod(manifest("while-away", sleeper(resources=guaranteed("1"))))
    taken = cpus_of(pod)
    assert len(taken) == 1 and not taken & RESERVED  # the static policy, from the store

    # The API server comes back with a changed configuration: applied live, reported.
    before = node_status(api)["time"]
    changed = api.put_configmap(NS, DEFAULT_CM, {"config.yaml": "policy: {name: none}\n"})
    api.start()
    wait_status(api, applied=True, resourceVersion=changed["metadata"]["resourceVersion"])
    assert node_status(api)["time"] >= before  # type: ignore[operator]
    wait_for(lambda: "policy none" in status_cli(enforcer), what="policy none in force")
    kubelet.remove_pod(pod)


def test_refused_configuration_keeps_the_last_good_one(
    api: FakeAPIServer,
    make_enforcer: Callable[..., EnforcerProcess],
    kubelet_for: Callable[[EnforcerProcess], KubeletEmulator],
) -> None:
    api.put_configmap(NS, DEFAULT_CM, STATIC)
    enforcer = make_enforcer(metrics=True).start()
    wait_status(api, applied=True)
    kubelet = kubelet_for(enforcer)
    exclusive = kubelet.run_pod(manifest("pinned", sleeper(resources=guaranteed("1"))))
    shared = kubelet.run_pod(manifest("shared", sleeper()))
    before = (cpus_of(exclusive), cpus_of(shared))
    state_before = Path(enforcer.state_dir, "config.last-good.json").read_text()

    # The node's own ConfigMap wins, and is wrong twice over: an unknown key, and reserved
    # CPUs this machine does not have (only the enforcer, with the topology, can tell).
    bad = api.put_configmap(NS, NODE_CM, {"config.yaml": "policy: {name: static, bogus: 1}\n"})
    st = wait_status(api, applied=False, resourceVersion=bad["metadata"]["resourceVersion"])
    assert st["source"] == f"configmap/{NS}/{NODE_CM}"
    assert st["inForce"] == f"configmap/{NS}/{DEFAULT_CM}"
    assert st["errors"] == ["policy.bogus: Extra inputs are not permitted"]
    worse = api.put_configmap(NS, NODE_CM, {"config.yaml": "policy: {reservedCPUs: '4095'}\n"})
    st = wait_status(api, applied=False, resourceVersion=worse["metadata"]["resourceVersion"])
    assert "policy.reservedCPUs" in st["errors"][0]  # type: ignore[index]

    # The Node's status and the Event are two writes: wait for both Events.
    wait_for(lambda: len(api.events) >= 2, what="an Event for each refused configuration")
    assert [e["involvedObject"]["resourceVersion"] for e in api.events] == [
        bad["metadata"]["resourceVersion"],
        worse["metadata"]["resourceVersion"],
    ]
    for event in api.events:
        assert event["reason"] == "ConfigRefused" and event["type"] == "Warning"
        assert event["involvedObject"]["name"] == NODE_CM
    # Nothing moved, the last good configuration is still the one in force and stored.
    assert (cpus_of(exclusive), cpus_of(shared)) == before
    assert "policy static" in status_cli(enforcer)
    assert Path(enforcer.state_dir, "config.last-good.json").read_text() == state_before
    metrics = scrape(enforcer)
    assert sample(metrics, "resource_enforcer_config_reloads_total", outcome="refused") == 2
    # A pod created now is still placed by the static policy.
    with pytest.raises(grpc.RpcError) as err:
        kubelet.run_pod(manifest("no-room", sleeper(resources=guaranteed("1"))))
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED

    # Deleting the broken node ConfigMap falls back to the default one: applied, reported.
    api.delete_configmap(NS, NODE_CM)
    wait_status(api, applied=True, source=f"configmap/{NS}/{DEFAULT_CM}")


def test_node_configmap_overrides_and_its_deletion_falls_back(
    api: FakeAPIServer, make_enforcer: Callable[..., EnforcerProcess]
) -> None:
    api.put_configmap(NS, DEFAULT_CM, STATIC)
    enforcer = make_enforcer().start()
    wait_status(api, applied=True, source=f"configmap/{NS}/{DEFAULT_CM}")
    assert "policy static" in status_cli(enforcer)
    api.put_configmap(NS, NODE_CM, {"config.yaml": "policy: {name: none}\n"})
    wait_status(api, applied=True, source=f"configmap/{NS}/{NODE_CM}")
    wait_for(lambda: "policy none" in status_cli(enforcer))
    api.delete_configmap(NS, NODE_CM)
    wait_status(api, applied=True, source=f"configmap/{NS}/{DEFAULT_CM}")
    wait_for(lambda: "policy static" in status_cli(enforcer))
    # No ConfigMap at all: built-in defaults (no --config file here), and nothing stored.
    api.delete_configmap(NS, DEFAULT_CM)
    wait_status(api, applied=True, source="builtin")
    wait_for(lambda: "policy none" in status_cli(enforcer))
    assert not Path(enforcer.state_dir, "config.last-good.json").exists()


def test_metrics_show_the_cri_calls(
    api: FakeAPIServer,
    make_enforcer: Callable[..., EnforcerProcess],
    kubelet_for: Callable[[EnforcerProcess], KubeletEmulator],
) -> None:
    api.put_configmap(NS, DEFAULT_CM, STATIC)
    enforcer = make_enforcer(metrics=True).start()
    wait_status(api, applied=True)
    kubelet = kubelet_for(enforcer)
    pod = kubelet.run_pod(manifest("measured", sleeper(resources=guaranteed("1"))))
    with pytest.raises(grpc.RpcError):
        kubelet.run_pod(manifest("refused", sleeper(resources=guaranteed("1"))))
    kubelet.remove_pod(pod)
    assert scrape(enforcer, "/healthz") == "ok\n"
    text = scrape(enforcer)

    def calls(method: str, code: str = "0") -> float:
        return sample(text, "resource_enforcer_cri_calls_total", method=method, code=code)

    assert calls("RunPodSandbox") >= 2 and calls("StartContainer") >= 1
    assert calls("CreateContainer") == 1
    assert calls("CreateContainer", str(grpc.StatusCode.RESOURCE_EXHAUSTED.value[0])) == 1
    assert calls("StopContainer") >= 1 and calls("RemovePodSandbox") >= 1
    assert calls("Version") >= 1  # the readiness check of EnforcerProcess
    count = sample(text, "resource_enforcer_cri_call_seconds_count", method="CreateContainer")
    assert count == 2
    assert sample(text, "resource_enforcer_cri_call_seconds_sum", method="CreateContainer") > 0
    assert sample(text, "resource_enforcer_policy_decisions_total", policy="static",
                  kind="exclusive") == 1  # fmt: skip
    assert sample(text, "resource_enforcer_policy_refusals_total", reason="no-room") == 1
    assert sample(text, "resource_enforcer_config_reloads_total", outcome="applied") == 1
    free = sample(text, "resource_enforcer_cpus", use="free")
    shared = sample(text, "resource_enforcer_cpus", use="shared")
    assert free + sample(text, "resource_enforcer_cpus", use="reserved") == shared
    assert shared == len(ALL)  # the pod is gone: its CPU is shared again


def test_a_newer_enforcer_takes_over_and_a_link_is_left_when_none_runs(
    api: FakeAPIServer,
    containerd: PrivateContainerd,
    make_enforcer: Callable[..., EnforcerProcess],
    kubelet_for: Callable[[EnforcerProcess], KubeletEmulator],
    tmp_path: Path,
) -> None:
    """A DaemonSet update (maxSurge 1): the new pod starts while the old one runs."""
    api.put_configmap(NS, DEFAULT_CM, STATIC)
    old = make_enforcer(tmp_path / "node", metrics=True)
    old.extra_args.append("--fallback-link")
    old.start()
    wait_status(api, applied=True)
    pod = kubelet_for(old).run_pod(manifest("survivor", sleeper(resources=guaranteed("1"))))
    pinned = cpus_of(pod)

    new = make_enforcer(tmp_path / "node")  # same relay socket and state folder
    new.log_path = tmp_path / "new.log"  # its own log: each one's lines are looked for below
    new.metrics_address = old.metrics_address  # same port, as with hostNetwork
    new.extra_args.append("--fallback-link")
    new.start()
    wait_for(lambda: "handed over" in old.log_tail(), what="the old one to hand over")
    wait_for(lambda: "took over the state" in new.log_tail(), what="the new one to take over")
    # The new one knows the old one's containers: the exclusive CPU is still taken.
    kubelet = kubelet_for(new)
    with pytest.raises(grpc.RpcError) as err:
        kubelet.run_pod(manifest("no-room", sleeper(resources=guaranteed("1"))))
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert cpus_of(pod) == pinned
    wait_for(lambda: healthy(new), what="the port to be free")  # the old one let it go
    # The new one's counters: the old one created the survivor, the new one refused one.
    text = scrape(new)
    create = "resource_enforcer_cri_calls_total"
    assert sample(text, create, method="CreateContainer", code="0") == 0
    assert sample(text, create, method="CreateContainer", code="8") == 1

    # The old pod is deleted: it exits without touching what is now the new one's.
    state = Path(new.state_dir, "state.json").read_bytes()
    assert old.stop() == 0
    assert Path(new.state_dir, "state.json").read_bytes() == state
    assert Path(new.relay_socket).is_socket() and not Path(new.relay_socket).is_symlink()

    # No enforcer at all (DaemonSet removed): kubelet's path leads to containerd directly.
    kubelet_for(new).remove_pod(pod)
    assert new.stop() == 0
    assert Path(new.relay_socket).is_symlink()
    assert str(Path(new.relay_socket).readlink()) == containerd.socket
    with grpc.insecure_channel(f"unix://{new.relay_socket}") as channel:
        version = api_pb2_grpc.RuntimeServiceStub(channel).Version(api_pb2.VersionRequest())
    assert version.runtime_name == "containerd"
    # The next enforcer replaces the link with its socket.
    new.start()
    wait_for(lambda: not Path(new.relay_socket).is_symlink(), what="the link replaced")
    assert Path(new.relay_socket).is_socket()
    new.wait_ready()
