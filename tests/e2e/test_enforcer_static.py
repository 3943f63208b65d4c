"""The enforcer end to end: kubelet emulator -> relay (console script) -> private containerd,
with the static policy on this 2-CPU machine (CPU 0 reserved, so CPU 1 is the one exclusive
CPU to hand out). Every assertion reads the real cgroup files."""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from enforcer.cri import api_pb2, api_pb2_grpc
from enforcer.state import StateStore
from enforcer.topology import CPUSet
from tests.support.cgroupfs import memory_limit, node_cpus
from tests.support.checks import cpus_of, wait_for
from tests.support.containerd import PrivateContainerd
from tests.support.enforcer_process import EnforcerProcess, free_port
from tests.support.kubelet import KubeletEmulator
from tests.support.pods import guaranteed, manifest, sleeper

pytestmark = pytest.mark.containerd

ALL = node_cpus()
if len(ALL) < 2:  # pragma: no cover - the suite's machines have 2 CPUs or more
    raise RuntimeError("these tests need at least 2 CPUs")
RESERVED = CPUSet.of(min(ALL))


@pytest.fixture(scope="module")
def enforcer(
    containerd: PrivateContainerd, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EnforcerProcess]:
    workdir = tmp_path_factory.mktemp("enforcer")
    config = workdir / "config.yaml"
    config.write_text(f'policy: {{name: static, reservedCPUs: "{RESERVED}"}}\n')
    proc = EnforcerProcess(workdir, runtime_socket=containerd.socket, config=str(config))
    proc.start()
    try:
        yield proc
    finally:
        code = proc.stop()
        assert code == 0, f"SIGTERM should stop the enforcer cleanly:\n{proc.log_tail()}"


@pytest.fixture
def kubelet(enforcer: EnforcerProcess, tmp_path: Path) -> Iterator[KubeletEmulator]:
    with KubeletEmulator(enforcer.relay_socket, log_root=tmp_path / "pods") as emu:
        yield emu


def test_exclusive_cpu_and_shared_pool_follow_each_other(kubelet: KubeletEmulator) -> None:
    shared = kubelet.run_pod(manifest("be", sleeper()))
    assert cpus_of(shared) == ALL
    exclusive = kubelet.run_pod(manifest("g1", sleeper(resources=guaranteed("1"))))
    taken = cpus_of(exclusive)
    assert len(taken) == 1 and not taken & RESERVED
    # The BestEffort container, running all along, was moved off the exclusive CPU.
    assert cpus_of(shared) == ALL - taken
    # Its processes really are confined: the kernel's view of the sleeping process.
    out = kubelet.exec_sync(shared.container_id("app"), ["cat", "/proc/self/status"])
    allowed = [line for line in out.stdout.decode().splitlines() if "Cpus_allowed_list" in line]
    assert CPUSet.parse(allowed[0].split(":")[1]) == ALL - taken
    kubelet.remove_pod(exclusive)
    assert cpus_of(shared) == ALL


def test_no_cpu_left_fails_with_resource_exhausted(kubelet: KubeletEmulator) -> None:
    kubelet.run_pod(manifest("first", sleeper(resources=guaranteed("1"))))
    with pytest.raises(grpc.RpcError) as err:
        kubelet.run_pod(manifest("second", sleeper(resources=guaranteed("1"))))
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "asked for 1 exclusive CPUs, 0 free" in err.value.details()


def test_kubelets_update_keeps_the_pinning(kubelet: KubeletEmulator) -> None:
    pod = kubelet.run_pod(manifest("g", sleeper(resources=guaranteed("1", "64Mi"))))
    pinned = cpus_of(pod)
    kubelet.update_container_resources(
        pod.container_id("app"),
        {
            "cpu_period": 100000,
            "cpu_quota": 100000,
            "cpu_shares": 1024,
            "memory_limit_in_bytes": 128 << 20,
            "cpuset_cpus": str(ALL),
        },
    )
    assert cpus_of(pod) == pinned
    assert memory_limit(pod.cgroup_path("memory", "app")) == 128 << 20


def test_passthrough_calls_answer_as_the_runtime(
    kubelet: KubeletEmulator, containerd: PrivateContainerd
) -> None:
    pod = kubelet.run_pod(manifest("pt", sleeper()))
    cid = pod.container_id("app")
    out = kubelet.exec_sync(cid, ["echo", "through the relay"])
    assert out.exit_code == 0 and out.stdout == b"through the relay\n"
    stats = kubelet.runtime.ContainerStats(api_pb2.ContainerStatsRequest(container_id=cid))
    assert stats.stats.attributes.id == cid
    images = kubelet.images.ListImages(api_pb2.ListImagesRequest())
    direct = api_pb2.ListImagesResponse.FromString(
        containerd.channel().unary_unary("/runtime.v1.ImageService/ListImages")(b"")
    )
    assert sorted(i.id for i in images.images) == sorted(i.id for i in direct.images)
    with pytest.raises(grpc.RpcError) as err:
        kubelet.channel.unary_unary("/runtime.v1.RuntimeService/NoSuchMethod")(b"")
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_status_shows_containers_and_the_cpu_map(
    kubelet: KubeletEmulator, enforcer: EnforcerProcess
) -> None:
    pod = kubelet.run_pod(manifest("shown", sleeper(resources=guaranteed("1"))))
    out = enforcer.run_cli("status", "--state-dir", enforcer.state_dir)
    assert out.returncode == 0, out.stderr
    assert "policy static" in out.stdout
    row = next(line for line in out.stdout.splitlines() if " shown " in f" {line} ")
    assert "Guaranteed" in row and "exclusive" in row
    # Which CPU is the policy's choice (on a machine with SMT, the reserved CPU's sibling).
    [cpu] = cpus_of(pod)
    assert f"cpu{cpu}=e2e/shown/app" in out.stdout

    # The same as data, for scripts and support tickets.
    def as_json() -> dict:
        out = enforcer.run_cli("status", "--state-dir", enforcer.state_dir, "--output", "json")
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    # Which runtime container is which is written within moments, not at once.
    wait_for(
        lambda: any(c["containerID"] for c in as_json()["containers"] if c["pod"] == "shown"),
        why=lambda: json.dumps(as_json()["containers"]),
    )
    shown = as_json()
    assert shown["policy"] == "static" and shown["reservedCPUs"] == str(RESERVED)
    [row] = [c for c in shown["containers"] if c["pod"] == "shown"]
    assert (row["namespace"], row["container"], row["qos"], row["kind"]) == (
        "e2e",
        "app",
        "Guaranteed",
        "exclusive",
    )
    assert row["containerID"] == pod.container_id("app")
    assert row["phase"] in ("created", "running")
    assert row["cpus"] == row["exclusiveCPUs"] == str(cpu) and row["problem"] is None
    by_cpu = {c["cpu"]: c for c in shown["cpus"]}
    assert sorted(by_cpu) == sorted(ALL)
    assert (by_cpu[cpu]["use"], by_cpu[cpu]["holder"]) == ("exclusive", "e2e/shown/app")
    assert by_cpu[min(ALL)]["use"] == "reserved" and by_cpu[min(ALL)]["runsShared"] is True
    state = Path(enforcer.state_dir, "state.json")
    assert oct(state.stat().st_mode & 0o777) == "0o600"
    assert oct(Path(enforcer.state_dir).stat().st_mode & 0o777) == "0o700"


def test_relay_socket_mode(enforcer: EnforcerProcess) -> None:
    assert oct(os.stat(enforcer.relay_socket).st_mode & 0o777) == "0o660"


def _exclusive_holders(state_dir: str) -> dict[int, list[str]]:
    # The state as the next process reads it: the file and its journal's records.
    saved = StateStore(state_dir).load(move_aside=False)
    if saved is None:  # moved aside, not yet rebuilt
        return {}
    holders: dict[int, list[str]] = {}
    for entry in saved["policy"]["admitted"]:
        for cpu in CPUSet.parse(entry["exclusive"]):
            holders.setdefault(cpu, []).append(entry["request"]["pod_name"])
    return holders


def test_sigkill_in_a_churn_leaves_no_cpu_held_twice(
    containerd: PrivateContainerd, tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f'policy: {{name: static, reservedCPUs: "{RESERVED}"}}\n')
    proc = EnforcerProcess(tmp_path / "churn", runtime_socket=containerd.socket, config=str(config))
    proc.start()
    try:
        with KubeletEmulator(proc.relay_socket, log_root=tmp_path / "pods") as kubelet:
            for round_ in range(4):
                running = []
                for i in range(3):
                    try:
                        running.append(
                            kubelet.run_pod(
                                manifest(f"churn{round_}-{i}", sleeper(resources=guaranteed("1")))
                            )
                        )
                    except grpc.RpcError as exc:
                        assert exc.code() in (
                            grpc.StatusCode.RESOURCE_EXHAUSTED,
                            grpc.StatusCode.UNAVAILABLE,
                        )
                # Killed in the middle: after some creations, before the removals.
                proc.kill9()
                proc.start()
                for pod in running[:1]:
                    kubelet.remove_pod(pod)
                holders = _exclusive_holders(proc.state_dir)
                assert all(len(h) == 1 for h in holders.values()), holders
                live = {
                    c.id for c in kubelet.list_containers() if c.state == api_pb2.CONTAINER_RUNNING
                }
                saved = StateStore(proc.state_dir).load(move_aside=False)
                assert saved is not None
                tracked = {c["container_id"] for c in saved["containers"]}
                assert tracked <= live | {None}, "state tracks containers that are gone"
                for pod in running[1:]:
                    kubelet.remove_pod(pod)
    finally:
        assert proc.stop() == 0, proc.log_tail()


def test_corrupt_state_is_moved_aside_and_rebuilt(
    containerd: PrivateContainerd, tmp_path: Path
) -> None:
    # Rebuilt from the runtime: containerd's verbose status has the creation config, CRI-O's
    # statuses the pod, the container and its resources (enforcer.cri.convert).
    config = tmp_path / "config.yaml"
    config.write_text(f'policy: {{name: static, reservedCPUs: "{RESERVED}"}}\n')
    proc = EnforcerProcess(
        tmp_path / "corrupt", runtime_socket=containerd.socket, config=str(config)
    )
    proc.start()
    try:
        with KubeletEmulator(proc.relay_socket, log_root=tmp_path / "pods") as kubelet:
            pod = kubelet.run_pod(manifest("survivor", sleeper(resources=guaranteed("1"))))
            pinned = cpus_of(pod)
            proc.stop(signal.SIGKILL)
            Path(proc.state_dir, "state.json").write_text("{ this is not json")
            proc.start()
            wait_for(lambda: "survivor" in json.dumps(_exclusive_holders(proc.state_dir)))
            assert _exclusive_holders(proc.state_dir) == {min(pinned): ["survivor"]}
            assert list(Path(proc.state_dir).glob("state.json.corrupt-*"))
            assert "is corrupt" in proc.log_tail(200)
            assert cpus_of(pod) == pinned
    finally:
        assert proc.stop() == 0, proc.log_tail()


def test_containerd_restart_under_the_relay(
    kubelet: KubeletEmulator, containerd: PrivateContainerd
) -> None:
    pod = kubelet.run_pod(manifest("before", sleeper()))
    containerd.stop()
    try:
        started = time.monotonic()
        with pytest.raises(grpc.RpcError) as err:
            kubelet.version()
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert time.monotonic() - started < 5
    finally:
        containerd.start()
    wait_for(lambda: _answers(kubelet), timeout=20)
    assert kubelet.container_status(pod.container_id("app")).state == api_pb2.CONTAINER_RUNNING
    kubelet.run_pod(manifest("after", sleeper()))


def _answers(kubelet: KubeletEmulator) -> bool:
    try:
        kubelet.version()
        return True
    except grpc.RpcError:
        return False


def test_reconfiguration_moves_what_no_longer_fits(
    containerd: PrivateContainerd, tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f'policy: {{name: static, reservedCPUs: "{RESERVED}"}}\n')
    proc = EnforcerProcess(
        tmp_path / "reconf", runtime_socket=containerd.socket, config=str(config)
    )
    proc.start()
    try:
        with KubeletEmulator(proc.relay_socket, log_root=tmp_path / "pods") as kubelet:
            exclusive = kubelet.run_pod(manifest("holder", sleeper(resources=guaranteed("1"))))
            shared = kubelet.run_pod(manifest("sharer", sleeper()))
            held = cpus_of(exclusive)
            assert cpus_of(shared) == ALL - held
            # The CPU it holds becomes reserved: it moves to another, and the log says so.
            config.write_text(f'policy: {{name: static, reservedCPUs: "{held}"}}\n')
            wait_for(lambda: cpus_of(exclusive) == RESERVED, timeout=15, why=proc.log_tail)
            wait_for(lambda: cpus_of(shared) == ALL - RESERVED, timeout=15, why=proc.log_tail)
            assert f"e2e/holder/app: exclusive CPUs {held} -> {RESERVED}" in proc.log_tail(200)
            # Every CPU reserved: nothing left to hold alone, so it joins the shared pool.
            config.write_text(f'policy: {{name: static, reservedCPUs: "{ALL}"}}\n')
            wait_for(lambda: cpus_of(exclusive) == ALL, timeout=15, why=proc.log_tail)
            wait_for(lambda: cpus_of(shared) == ALL, timeout=15, why=proc.log_tail)
            assert "e2e/holder/app" in proc.log_tail(50) and "shared pool" in proc.log_tail(50)
            # A configuration that does not fit the machine is refused; nothing moves.
            config.write_text('policy: {name: static, reservedCPUs: "0-999"}\n')
            wait_for(lambda: "policy.reservedCPUs" in proc.log_tail(200), why=proc.log_tail)
            assert cpus_of(exclusive) == ALL and cpus_of(shared) == ALL
    finally:
        assert proc.stop() == 0, proc.log_tail()


def test_a_container_gone_behind_the_relays_back_is_released_on_relisting(
    kubelet: KubeletEmulator, containerd: PrivateContainerd
) -> None:
    shared = kubelet.run_pod(manifest("stays", sleeper()))
    gone = kubelet.run_pod(manifest("vanishes", sleeper(resources=guaranteed("1"))))
    assert cpus_of(shared) == ALL - cpus_of(gone)
    # Removed on containerd directly, as an operator with crictl might: the relay never saw it.
    direct = api_pb2_grpc.RuntimeServiceStub(containerd.channel())
    cid = gone.container_id("app")
    direct.StopContainer(api_pb2.StopContainerRequest(container_id=cid, timeout=0))
    direct.RemoveContainer(api_pb2.RemoveContainerRequest(container_id=cid))
    kubelet.list_containers()  # kubelet's relisting (an empty filter), through the relay
    wait_for(lambda: cpus_of(shared) == ALL)


def test_a_cpuset_changed_behind_the_enforcers_back_is_repaired(
    containerd: PrivateContainerd, tmp_path: Path
) -> None:
    # Someone (an operator, another agent) widens a shared container onto the exclusive CPU:
    # the periodic read-back finds it and puts it back, without any CRI event.
    config = tmp_path / "config.yaml"
    config.write_text(
        f'policy: {{name: static, reservedCPUs: "{RESERVED}"}}\nverify: {{periodSeconds: 1}}\n'
    )
    proc = EnforcerProcess(
        tmp_path / "drift",
        runtime_socket=containerd.socket,
        config=str(config),
        metrics_address=f"127.0.0.1:{free_port()}",
    )
    proc.start()
    try:
        with KubeletEmulator(proc.relay_socket, log_root=tmp_path / "pods") as kubelet:
            exclusive = kubelet.run_pod(manifest("owner", sleeper(resources=guaranteed("1"))))
            shared = kubelet.run_pod(manifest("drifter", sleeper()))
            held = cpus_of(exclusive)
            assert cpus_of(shared) == ALL - held
            cpuset = Path(shared.cgroup_path("cpuset", "app"), "cpuset.cpus")
            cpuset.write_text(str(ALL))
            assert cpus_of(shared) == ALL  # the kernel took the write
            wait_for(lambda: cpus_of(shared) == ALL - held, timeout=15, why=proc.log_tail)
            assert cpus_of(exclusive) == held
            assert "drifter container app" in proc.log_tail(100)
            with urllib.request.urlopen(proc.metrics_url + "/metrics", timeout=5) as resp:
                text = resp.read().decode()
            assert "resource_enforcer_cpuset_repairs_total 1.0" in text
    finally:
        assert proc.stop() == 0, proc.log_tail()


# ----- bounds before work (issue 11: item 7, defects 4 and 9) --------------------------------

RESOURCES_KEY = "resource-enforcer.dev/resources"


def test_absurd_annotations_fall_back_to_kubelets_values(
    kubelet: KubeletEmulator, enforcer: EnforcerProcess
) -> None:
    huge = {"cpu": "1e999990", "memory": "64Mi"}
    absurd = json.dumps({"containers": {"app": {"requests": huge, "limits": huge}}})
    # A quantity that once held the worker for 20 s: refused by its exponent, so the create
    # answers at once, and kubelet's own values (1 CPU, Guaranteed) decide.
    pinned = kubelet.run_pod(
        manifest("absurd", sleeper(resources=guaranteed("1")), annotations={RESOURCES_KEY: absurd})
    )
    taken = cpus_of(pinned)
    assert len(taken) == 1 and not taken & RESERVED
    # 100,000 levels of nesting once answered INTERNAL with a traceback in the log.
    deep = kubelet.run_pod(manifest("deep", sleeper(), annotations={RESOURCES_KEY: "[" * 100_000}))
    assert cpus_of(deep) == ALL - taken
    log = enforcer.log_tail(400)
    assert "Traceback" not in log
    for pod, why in (("e2e/absurd", "out of range"), ("e2e/deep", "100000 levels deep")):
        warning = next(line for line in log.splitlines() if f"pod {pod}" in line and why in line)
        assert RESOURCES_KEY in warning


@pytest.mark.parametrize(
    ("cpus", "mems", "named"),
    [
        ("0-99999", "", 'cpuset_cpus "0-99999"'),
        ("abc", "", 'cpuset_cpus "abc"'),
        (str(ALL), "0-1023", 'cpuset_mems "0-1023"'),
    ],
)
def test_kubelets_bad_cpuset_is_refused_at_create(
    kubelet: KubeletEmulator, cpus: str, mems: str, named: str
) -> None:
    pod = kubelet.run_pod_sandbox(manifest("badset", sleeper()))
    request = kubelet.create_request(pod, "app")
    request.config.linux.resources.cpuset_cpus = cpus
    request.config.linux.resources.cpuset_mems = mems
    with pytest.raises(grpc.RpcError) as err:
        kubelet.create_container(pod, "app", request=request)
    # Refused at CreateContainer, naming the field and value; it used to fail in runc at start.
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "pod e2e/badset container app: the CRI request's" in err.value.details()
    assert named in err.value.details()
    assert kubelet.list_containers(pod.sandbox_id) == []
