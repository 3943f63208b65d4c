"""Fault: the state folder cannot be written: its file system full, or remounted read-only
under a running enforcer, or read-only when the enforcer starts."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from tests.faults.conftest import EnvFactory
from tests.faults.cri_calls import Reaction
from tests.faults.env import FaultEnv
from tests.faults.figures import OTHER
from tests.faults.settings import count_id, fault_count
from tests.faults.state_dir import TmpfsStateDir
from tests.support.kubelet_sends import BEST_EFFORT, BURSTABLE, GUARANTEED

KIND = "state-write"
FULL = "file system full"
READ_ONLY = "read-only"
READ_ONLY_AT_START = "read-only at start"
VARIANTS = (FULL, READ_ONLY, READ_ONLY_AT_START)
CLEAR_REFUSAL_SECONDS = 5.0


def while_unwritable(env: FaultEnv, stage: str) -> None:
    """What kubelet does while the state cannot be written, and what it relies on: read calls
    answered, stops passing, and a create either placed or refused with a message that names
    the state folder."""
    state_dir = env.enforcer.state_dir
    if (why := env.node.answers()) is not None:
        env.figures.violation(
            OTHER, f"reads@{stage}", f"{stage}: read calls through the relay fail: {why}"
        )
    victims = [p for p in env.node.removable() if p.qos != GUARANTEED]
    if victims and (why := env.node.stop_once(env.rng.choice(victims))) is not None:
        env.figures.violation(
            OTHER, f"stop@{stage}", f"{stage}: kubelet's StopContainer failed: {why}"
        )
    for qos in (GUARANTEED, env.rng.choice((BURSTABLE, BEST_EFFORT))):
        # Right after a start the enforcer may still be reading the runtime (and say so):
        # only a refusal that goes on not naming the folder counts.
        deadline = time.monotonic() + CLEAR_REFUSAL_SECONDS
        while True:
            outcome = env.node.start_pod(env.node.manifest_for(qos), Reaction.GIVE_UP)
            clear = outcome.started or outcome.code == grpc.StatusCode.RESOURCE_EXHAUSTED
            if clear or state_dir in outcome.details or time.monotonic() >= deadline:
                break
            time.sleep(0.5)
        if not clear and state_dir not in outcome.details:
            env.figures.violation(
                OTHER,
                f"refusal@{stage}/{qos}",
                f"{stage}: a {qos} pod's CreateContainer failed with "
                f"{outcome.code.name if outcome.code else '?'}: {outcome.details!r}, a message "
                f"that does not name the state folder {state_dir}",
            )
    env.checker.sample(stage)
    proc = env.enforcer.proc
    if proc is None or proc.poll() is not None:
        env.figures.violation(
            OTHER,
            f"exited@{stage}",
            f"{stage}: the enforcer exited (code {proc.returncode if proc else '?'}): "
            f"{env.log_lines(3)}",
        )


@pytest.mark.parametrize("faults", [fault_count(KIND)], ids=count_id)
def test_state_writes_failing(fault_env: EnvFactory, faults: int) -> None:
    mounts: list[TmpfsStateDir] = []

    def on_tmpfs(path: Path) -> Callable[[], None]:
        tmpfs = TmpfsStateDir(path)
        tmpfs.mount()
        mounts.append(tmpfs)
        return tmpfs.unmount

    env = fault_env(KIND, faults, prepare_state_dir=on_tmpfs)
    tmpfs = mounts[0]
    env.start_sentinels()
    order = [VARIANTS[i % len(VARIANTS)] for i in range(faults)]
    env.rng.shuffle(order)
    for i, variant in enumerate(order):
        if env.stop_injecting():
            break
        stage = f"{variant} #{i + 1}"
        env.node.start_pod(env.node.manifest_for(BEST_EFFORT))  # something to stop meanwhile
        if variant == READ_ONLY_AT_START:
            up = env.restart_enforcer(stage, kill=True, between=tmpfs.read_only)
        else:
            (tmpfs.fill if variant == FULL else tmpfs.read_only)()
            up = True
        env.figures.fault(variant)
        if up:
            while_unwritable(env, stage)
        (tmpfs.empty if variant == FULL else tmpfs.read_write)()
        if not up or env.rng.random() < 0.4:
            # Killed once writable again: what it could not write must not be lost.
            env.restart_enforcer(f"{stage}, killed once writable", kill=True)
        env.ensure_enforcer(stage)
        env.node.catch_up()
        env.checker.settle(stage)
        env.checker.probe(env.node, stage, keep=env.rng.random() < 0.5)
    env.finish()
