"""A second plugin on the same state folder never blocks pod creation: it does not register
with the runtime until it holds the state lock, and gives up after a while (a log line, exit
code 3, no health file). Two real plugin processes on one state folder against the real
containerd 1.7.24; the lock wait itself against a real flock held by another descriptor."""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from enforcer.app.nri import EXIT_LOCKED_OUT, hold_state_lock, serve_nri
from enforcer.handover import StateLock
from enforcer.options import RunOptions
from enforcer.topology import CPUSet
from tests.support.cgroupfs import node_cpus
from tests.support.containerd17 import NriContainerd, containerd17_available
from tests.support.kubelet import KubeletEmulator
from tests.support.nri_enforcer import NriEnforcerProcess, cpus_of, health, wait_for
from tests.support.pods import guaranteed, manifest, sleeper

ALL = node_cpus()
RESERVED = CPUSet.of(min(ALL))
NS = "nri-second"
BURSTABLE = {"requests": {"cpu": "100m"}}
WAITING = "not registering with the runtime until it is ours"


# -- the wait for the lock ---------------------------------------------------------------------


@pytest.fixture
def held(tmp_path: Path) -> Iterator[StateLock]:
    holder = StateLock(tmp_path)
    assert holder.try_acquire()
    yield holder
    holder.release()


def test_it_gives_up_with_a_log_line_when_the_lock_stays_taken(
    held: StateLock, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="enforcer")
    lock = StateLock(tmp_path)
    assert not asyncio.run(hold_state_lock(lock, asyncio.Event(), 0.3))
    assert lock.fd is None
    assert WAITING in caplog.text
    assert f"gave up after 0.3s: enforcer pid {held.holder()} still holds" in caplog.text


def test_stopped_while_waiting_it_gives_up_quietly(
    held: StateLock, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> bool:
        stop = asyncio.Event()
        asyncio.get_running_loop().call_later(0.2, stop.set)
        return await hold_state_lock(StateLock(tmp_path), stop, 60)

    assert not asyncio.run(main())
    assert "gave up" not in caplog.text


def test_it_holds_the_lock_once_the_other_lets_go(held: StateLock, tmp_path: Path) -> None:
    threading.Timer(0.3, held.release).start()
    lock = StateLock(tmp_path)
    assert asyncio.run(hold_state_lock(lock, asyncio.Event(), 60))
    assert lock.fd is not None
    lock.release()


def test_the_command_exits_3_and_leaves_no_health_file(held: StateLock, tmp_path: Path) -> None:
    health = tmp_path / "health"
    options = RunOptions(
        state_dir=str(tmp_path),
        nri_socket=str(tmp_path / "nri.sock"),
        metrics_address="",
        cluster_config="off",
        health_file=str(health),
    )
    assert asyncio.run(serve_nri(options, lock_wait=0.5)) == EXIT_LOCKED_OUT
    assert not health.exists()
    assert not (tmp_path / "nri.sock").exists()  # it never tried the runtime
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


# -- two real plugins on one state folder --------------------------------------------------------


@pytest.fixture(scope="module")
def ctrd(containerd17: NriContainerd) -> Iterator[NriContainerd]:
    assert containerd17_available() is None
    with NriContainerd() as own:
        yield own


def test_a_second_plugin_waits_unregistered_and_pods_start_meanwhile(
    ctrd: NriContainerd, tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f'policy: {{name: static, reservedCPUs: "{RESERVED}"}}\n')
    first = NriEnforcerProcess(tmp_path / "first", nri_socket=ctrd.nri_socket, config=str(config))
    second_health = tmp_path / "second.health"
    second = NriEnforcerProcess(
        tmp_path / "second",
        nri_socket=ctrd.nri_socket,
        config=str(config),
        extra_args=["--health-file", str(second_health)],
    )
    second.state_dir = first.state_dir  # one state folder
    first.start()
    try:
        with KubeletEmulator(ctrd.socket, log_root=tmp_path / "pods") as kubelet:
            exclusive = kubelet.run_pod(
                manifest("excl", sleeper(resources=guaranteed("1")), namespace=NS)
            )
            taken = cpus_of(exclusive)
            assert len(taken) == 1 and not taken & RESERVED

            second.start(wait=False)
            wait_for(lambda: WAITING in second.log_since_start(), why=second.log_tail)
            wait_for(lambda: health(second_health) == "standby", why=second.log_tail)
            # A Burstable pod created while the second waits: started, and placed by the
            # first (off the exclusive CPU), not refused UNAVAILABLE by the second.
            try:
                burstable = kubelet.run_pod(
                    manifest("burst", sleeper(resources=BURSTABLE), namespace=NS)
                )
            except grpc.RpcError as exc:
                raise AssertionError(
                    f"refused while a second plugin waits: {exc.code()}: {exc.details()}\n"
                    f"{second.log_tail()}"
                ) from None
            assert cpus_of(burstable) == ALL - taken
            assert "registered with the runtime" not in second.log_since_start()
            assert second.proc is not None and second.proc.poll() is None

            # The first stops: the second takes the state folder, registers, is synchronized
            # and knows who holds the exclusive CPU.
            assert first.stop() == 0
            wait_for(lambda: health(second_health) == "serving", timeout=60, why=second.log_tail)
            assert "the state folder" in second.log_since_start()
            with pytest.raises(grpc.RpcError) as refused:
                kubelet.run_pod(manifest("late", sleeper(resources=guaranteed("1")), namespace=NS))
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            kubelet.remove_pod(exclusive)
            wait_for(lambda: cpus_of(burstable) == ALL, why=second.log_tail)
            again = kubelet.run_pod(
                manifest("again", sleeper(resources=guaranteed("1")), namespace=NS)
            )
            mine = cpus_of(again)
            assert len(mine) == 1 and not mine & RESERVED
            wait_for(lambda: cpus_of(burstable) == ALL - mine, why=second.log_tail)
    finally:
        second.stop()
        first.stop()
