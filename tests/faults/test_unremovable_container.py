"""Fault: a container the runtime cannot remove after kubelet stopped it.

A real containerd 1.6 whose runc holds `runc start` (tests/support/held_runc.py,
`KRE_HOLD_START`): containerd's StartContainer is under way for that long, so the container is
"in starting state": StopContainer answers OK without doing anything, RemoveContainer is refused
("container is in starting state, can't be removed"), and every listing shows it created. kubelet
gives up on the pod meanwhile and stops and removes it again and again, relisting between.

What an operator relies on: the enforcer (its console script, the relay in front of that
containerd) settles on one state for it: one log line saying it is stuck, no release/adopt flip
and no re-pin loop, a `status` line and a metric naming it; and once the runtime lets it go, it
is released once. Truth is read from the runtime's own answers, the enforcer's log, `status`
and its metrics endpoint."""

from __future__ import annotations

import contextlib
import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from enforcer.cri import api_pb2
from enforcer.engine.adoption import STUCK_AFTER_SECONDS
from tests.support.containerd import ContainerdError, PrivateContainerd, containerd_available
from tests.support.enforcer_process import EnforcerProcess, free_port
from tests.support.held_runc import HOLD, install
from tests.support.images import BUSYBOX_IMAGE
from tests.support.kubelet import KubeletEmulator
from tests.support.pods import manifest, sleeper

pytestmark = pytest.mark.containerd

# kubelet's attempts last this long: past the enforcer's settle time, by several sweeps.
GIVE_UP_SECONDS = STUCK_AFTER_SECONDS + 8
HOLD_SECONDS = GIVE_UP_SECONDS + 10  # `runc start` held longer than kubelet's attempts


@pytest.fixture(scope="module")
def held_containerd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateContainerd]:
    reason = containerd_available()
    if reason:
        pytest.fail(f"a real containerd is needed: {reason}", pytrace=False)
    ctrd = PrivateContainerd(runc_binary=install(tmp_path_factory.mktemp("runc")))
    try:
        ctrd.start()
    except ContainerdError as exc:
        ctrd.close()
        pytest.fail(f"private containerd did not start: {exc}", pytrace=False)
    try:
        yield ctrd
    finally:
        ctrd.close()


def held_start() -> dict:
    return {
        "name": "app",
        "image": BUSYBOX_IMAGE,
        "command": ["sleep", "3600"],
        "env": [{"name": HOLD, "value": str(HOLD_SECONDS)}],
    }


def lines(proc: EnforcerProcess, *words: str) -> list[str]:
    text = proc.log_path.read_text(errors="replace")
    return [line for line in text.splitlines() if all(w in line for w in words)]


def status_row(proc: EnforcerProcess, pod: str) -> dict | None:
    out = proc.run_cli("status", "--state-dir", proc.state_dir, "--output", "json")
    assert out.returncode == 0, out.stderr
    rows = [r for r in json.loads(out.stdout)["containers"] if r["pod"] == pod]
    return rows[0] if rows else None


def stuck_gauge(proc: EnforcerProcess) -> float:
    with urllib.request.urlopen(proc.metrics_url + "/metrics", timeout=10) as answer:
        text = answer.read().decode()
    for line in text.splitlines():
        if line.startswith("resource_enforcer_containers_stuck "):
            return float(line.split()[1])
    raise AssertionError("resource_enforcer_containers_stuck is not exported")


def wait_for(predicate, timeout: float, why=lambda: "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met in time\n{why()}")
        time.sleep(0.2)


def test_a_container_the_runtime_cannot_remove_settles_in_one_state(
    held_containerd: PrivateContainerd, tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text('policy: {name: static, reservedCPUs: "0"}\n')
    proc = EnforcerProcess(
        tmp_path / "enforcer",
        runtime_socket=held_containerd.socket,
        config=str(config),
        metrics_address=f"127.0.0.1:{free_port()}",
    )
    proc.start()
    try:
        with KubeletEmulator(
            proc.relay_socket, log_root=tmp_path / "pods", timeout=HOLD_SECONDS + 30
        ) as kubelet:
            kubelet.run_pod(manifest("neighbour", sleeper()))  # a shared container beside it
            pod = kubelet.run_pod_sandbox(manifest("stuck", held_start()))
            cid = kubelet.create_container(pod, "app")

            def start() -> None:
                with contextlib.suppress(grpc.RpcError):
                    kubelet.start_container(cid)

            starting = threading.Thread(target=start)
            starting.start()
            runtime = kubelet.runtime
            refusals: set[str] = set()
            repins_before = len(lines(proc, "re-pinned container"))
            deadline = time.monotonic() + GIVE_UP_SECONDS
            while time.monotonic() < deadline:
                runtime.StopContainer(
                    api_pb2.StopContainerRequest(container_id=cid, timeout=0), timeout=30
                )
                try:
                    runtime.RemoveContainer(
                        api_pb2.RemoveContainerRequest(container_id=cid), timeout=30
                    )
                except grpc.RpcError as exc:
                    refusals.add(exc.details() or "")
                runtime.ListContainers(api_pb2.ListContainersRequest(), timeout=30)
                time.sleep(0.5)
            assert starting.is_alive(), "runc start was not held: the state was not provoked"
            assert any("starting state" in r for r in refusals), refusals

            wait_for(lambda: lines(proc, cid, "still lists it"), 15, proc.log_tail)
            assert len(lines(proc, "released", cid)) == 1, lines(proc, cid)
            assert lines(proc, "adopted running container", cid) == [], lines(proc, cid)
            assert len(lines(proc, cid, "still lists it")) == 1, lines(proc, cid)
            # At most its own move onto the shared pool: nobody re-pinned round and round.
            repins = lines(proc, "re-pinned container")[repins_before:]
            assert len(repins) <= 1, repins
            row = status_row(proc, "stuck")
            assert row is not None and row["containerID"] == cid
            assert "still lists it" in (row["problem"] or ""), row
            assert stuck_gauge(proc) == 1

            # The start ends; kubelet's next stop and removal work, and it is released once.
            starting.join(HOLD_SECONDS + 30)
            assert not starting.is_alive()
            runtime.StopContainer(
                api_pb2.StopContainerRequest(container_id=cid, timeout=0), timeout=30
            )
            runtime.RemoveContainer(api_pb2.RemoveContainerRequest(container_id=cid), timeout=30)
            wait_for(lambda: status_row(proc, "stuck") is None, 15, proc.log_tail)
            assert len(lines(proc, "released", cid)) == 2, lines(proc, cid)
            assert stuck_gauge(proc) == 0
            assert len(lines(proc, cid, "still lists it")) == 1
    finally:
        assert proc.stop() == 0, proc.log_tail()
