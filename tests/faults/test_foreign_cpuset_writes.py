"""Fault: containers' cpuset.cpus rewritten behind the enforcer's back (another agent, an
operator, a re-pin lost in a race): every running container's cgroup is given a wrong cpuset,
and must be repaired without a restart of the container."""

from __future__ import annotations

import pytest

from tests.faults.conftest import EnvFactory
from tests.faults.settings import count_id, fault_count
from tests.support.kubelet_sends import BEST_EFFORT, BURSTABLE, GUARANTEED

KIND = "foreign-write"
SHARED_PODS = 4  # churned shared pods besides the sentinels


@pytest.mark.parametrize("faults", [fault_count(KIND)], ids=count_id)
def test_cpusets_written_behind_the_enforcers_back(fault_env: EnvFactory, faults: int) -> None:
    env = fault_env(KIND, faults)
    env.start_sentinels()
    injected = 0
    round_ = 0
    while injected < faults and not env.stop_injecting():
        round_ += 1
        # With a holder of the exclusive CPU in most rounds, without one in the others.
        if env.rng.random() < 0.7:
            if not env.node.of_qos(GUARANTEED):
                env.checker.probe(env.node, f"round {round_}: a holder", keep=True)
        else:
            env.node.remove_all(GUARANTEED)
        while len([p for p in env.node.removable() if p.qos != GUARANTEED]) < SHARED_PODS:
            if not env.node.start_pod(
                env.node.manifest_for(env.rng.choice((BURSTABLE, BEST_EFFORT)))
            ).started:
                break
        stage = f"round {round_}"
        env.checker.settle(f"{stage}, before the writes", with_status=False)
        for seen in env.checker.sample(stage):
            if not seen.running or injected >= faults:
                continue
            assert seen.cpus is not None
            # Every CPU for the holder (it then shares), and for a shared container the
            # other of {every CPU, the reserved ones}: onto the held CPU, or off a free one.
            wrong = (
                env.online if seen.qos == GUARANTEED or seen.cpus != env.online else env.reserved
            )
            env.truth.write_cpus(seen, wrong)
            env.figures.fault("holder widened" if seen.qos == GUARANTEED else "shared rewritten")
            injected += 1
        env.checker.settle(f"{stage}, after the writes")
    env.finish()
