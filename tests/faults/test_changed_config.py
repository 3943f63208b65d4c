"""Fault: the enforcer restarted with a changed configuration, the reserved CPUs moved onto the
CPU a running Guaranteed container holds (that CPU alone, or every CPU); then the old
configuration back, by a live reload of the file or by another restart."""

from __future__ import annotations

import functools
import time

import pytest

from enforcer.topology import CPUSet
from tests.faults.conftest import EnvFactory
from tests.faults.env import FaultEnv
from tests.faults.figures import OTHER
from tests.faults.settings import SETTINGS, count_id, fault_count
from tests.faults.status_table import StatusError, read_status
from tests.support.kubelet_sends import BEST_EFFORT, BURSTABLE, GUARANTEED

KIND = "changed-config"


def held_cpus(env: FaultEnv) -> CPUSet | None:
    """The CPUs of the running Guaranteed container, as its cgroup has them."""
    for seen in env.checker.sample("holder"):
        if seen.running and seen.qos == GUARANTEED and seen.cpus is not None:
            return seen.cpus
    return None


def wait_in_force(env: FaultEnv, reserved: CPUSet, stage: str) -> None:
    """Until `status` shows the reloaded configuration's reserved CPUs (bounded)."""
    deadline = time.monotonic() + SETTINGS.settle_seconds
    seen = "nothing"
    while time.monotonic() < deadline:
        try:
            status = read_status(env.enforcer.state_dir)
            if status.reserved == reserved:
                return
            seen = str(status.reserved)
        except StatusError as exc:
            seen = str(exc)
        time.sleep(0.3)
    env.figures.violation(
        OTHER,
        f"reload@{stage}",
        f"{stage}: the reloaded configuration (reserved {reserved}) is not in force after "
        f"{SETTINGS.settle_seconds:.0f}s; `status` shows reserved {seen}",
    )


@pytest.mark.parametrize("faults", [fault_count(KIND)], ids=count_id)
def test_restart_with_reserved_cpus_moved_onto_a_held_cpu(
    fault_env: EnvFactory, faults: int
) -> None:
    env = fault_env(KIND, faults)
    env.start_sentinels()
    original = env.reserved
    injected = 0
    round_ = 0
    while injected < faults and not env.stop_injecting():
        round_ += 1
        env.checker.probe(env.node, f"round {round_}: a holder", keep=True)
        held = held_cpus(env)
        if held is None:
            break  # the probe recorded why no Guaranteed container runs
        env.node.start_pod(env.node.manifest_for(env.rng.choice((BURSTABLE, BEST_EFFORT))))
        # The restart: reserved CPUs moved onto the CPU the container holds; only that one
        # (the container can move to a CPU set free) or every CPU (it cannot be placed).
        moved = held if env.rng.random() < 0.5 else env.online
        what = "the held CPU" if moved == held else "every CPU"
        stage = f"round {round_}: restart with reserved {moved} ({what})"
        kill = env.rng.random() < 0.5
        env.restart_enforcer(stage, kill=kill, between=functools.partial(env.write_config, moved))
        env.figures.fault(f"restart{' (kill -9)' if kill else ''}, {what} reserved")
        injected += 1
        env.ensure_enforcer(stage)
        env.node.start_pod(env.node.manifest_for(GUARANTEED))  # a newcomer wants a CPU
        env.node.catch_up()
        env.checker.settle(stage)
        # The old configuration back.
        stage = f"round {round_}: reserved {original} again"
        if env.rng.random() < 0.5:
            env.write_config(original)
            env.figures.fault("live reload back")
            wait_in_force(env, original, stage)
        else:
            kill = env.rng.random() < 0.5
            env.restart_enforcer(stage, kill=kill, between=lambda: env.write_config(original))
            env.figures.fault("restart back (kill -9)" if kill else "restart back")
            env.ensure_enforcer(stage)
        injected += 1
        env.node.start_pod(env.node.manifest_for(GUARANTEED))  # a newcomer wants a CPU
        env.node.catch_up()
        env.checker.settle(stage)
    env.finish()
