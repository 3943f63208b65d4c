"""Fault: the state file damaged while the enforcer is down and containers run (a Guaranteed
one on the exclusive CPU, shared ones beside it), then the enforcer started again."""

from __future__ import annotations

import contextlib
import functools
import random
from pathlib import Path

import pytest

from tests.faults.conftest import EnvFactory
from tests.faults.corruption import VARIANTS, corrupt
from tests.faults.settings import count_id, fault_count
from tests.support.kubelet_sends import BEST_EFFORT, BURSTABLE, GUARANTEED

KIND = "corrupt-state"


def damage(
    done: list[str], state: Path, variant: str, rng: random.Random, stale: bytes | None
) -> None:
    done.append(corrupt(state, variant, rng, stale))


@pytest.mark.parametrize("faults", [fault_count(KIND)], ids=count_id)
def test_corrupt_state_with_containers_running(fault_env: EnvFactory, faults: int) -> None:
    env = fault_env(KIND, faults)
    env.start_sentinels()
    state = Path(env.enforcer.state_dir, "state.json")
    copies: list[bytes] = []
    order = [VARIANTS[i % len(VARIANTS)] for i in range(faults)]
    env.rng.shuffle(order)
    for i, variant in enumerate(order):
        if env.stop_injecting():
            break
        # A holder of the exclusive CPU and a shared pod that comes and goes.
        if not env.node.of_qos(GUARANTEED):
            env.checker.probe(env.node, f"before corruption #{i + 1}", keep=True)
        if env.rng.random() < 0.5:
            env.node.start_pod(env.node.manifest_for(env.rng.choice((BURSTABLE, BEST_EFFORT))))
        stale = copies[0] if copies else None
        if variant == "stale-copy" and stale is None:
            variant = "byte-flips"
        stage = f"{variant} #{i + 1}"
        done: list[str] = []
        env.restart_enforcer(
            stage,
            kill=True,
            between=functools.partial(damage, done, state, variant, env.rng, stale),
        )
        env.figures.fault(variant)
        env.ensure_enforcer(stage)
        # A newcomer asks for a CPU: with the holder running there is none to give.
        env.node.start_pod(env.node.manifest_for(GUARANTEED))
        env.node.catch_up()
        env.checker.settle(f"{stage}: {done[0] if done else variant}")
        env.checker.probe(env.node, stage, keep=True)
        with contextlib.suppress(OSError):
            copies.append(state.read_bytes())
    env.finish()
