"""Fault: containerd restarted under load (stopped with SIGTERM, or killed with SIGKILL, and
started again on the same root and state) at random points of a create/start/remove churn;
containers keep running under their shims."""

from __future__ import annotations

import contextlib
import os
import signal

import pytest

from tests.faults.churn import churn_with_fault
from tests.faults.conftest import EnvFactory
from tests.faults.settings import count_id, fault_count

KIND = "containerd-restart"
STATUS_EVERY = 3


@pytest.mark.parametrize("faults", [fault_count(KIND)], ids=count_id)
def test_containerd_restarted_under_load(fault_env: EnvFactory, faults: int) -> None:
    env = fault_env(KIND, faults)
    env.start_sentinels()
    ctrd = env.containerd
    for i in range(faults):
        if env.stop_injecting():
            break
        crash = env.rng.random() < 0.5
        stage = f"containerd {'killed' if crash else 'restarted'} #{i + 1}"

        def restart(crash: bool = crash) -> None:
            if crash and ctrd.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(ctrd.pid, signal.SIGKILL)
            ctrd.stop()
            ctrd.start()

        churn_with_fault(env.node, env.rng, restart, env.rng.uniform(0.0, 0.8))
        env.figures.fault("SIGKILL, start" if crash else "SIGTERM, start")
        env.node.catch_up()
        env.checker.settle(stage, with_status=i % STATUS_EVERY == 0)
        env.checker.probe(env.node, stage, keep=env.rng.random() < 0.5)
    env.finish()
