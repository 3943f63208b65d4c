"""Fault: the enforcer killed with SIGKILL at random points of a create/start/remove churn, then
started again on the same state folder, as the DaemonSet would."""

from __future__ import annotations

import pytest

from tests.faults.churn import churn_with_fault
from tests.faults.conftest import EnvFactory
from tests.faults.settings import count_id, fault_count

KIND = "kill9"


@pytest.mark.parametrize("faults", [fault_count(KIND)], ids=count_id)
def test_kill9_during_churn(fault_env: EnvFactory, faults: int) -> None:
    env = fault_env(KIND, faults)
    env.start_sentinels()
    for i in range(faults):
        if env.stop_injecting():
            break
        stage = f"kill -9 #{i + 1}"
        delay = env.rng.uniform(0.0, 1.0)

        def kill_and_restart(stage: str = stage) -> None:
            env.restart_enforcer(stage, kill=True)

        churn_with_fault(env.node, env.rng, kill_and_restart, delay)
        env.figures.fault("kill -9 mid-churn")
        env.ensure_enforcer(stage)
        env.node.catch_up()
        env.checker.settle(stage)
        env.checker.probe(env.node, stage, keep=env.rng.random() < 0.5)
    env.finish()
