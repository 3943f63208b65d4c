"""Fault: CreateContainer cut off on kubelet's side (a short deadline, passed on as grpc-timeout,
or the call cancelled) while containerd may go on creating the container; kubelet then retries
the same name and attempt, creates the next attempt, or gives up on the pod."""

from __future__ import annotations

import grpc
import pytest

from tests.faults.conftest import EnvFactory
from tests.faults.cri_calls import Reaction
from tests.faults.settings import count_id, fault_count
from tests.support.kubelet import RunningPod
from tests.support.kubelet_sends import BEST_EFFORT, BURSTABLE, GUARANTEED

KIND = "cancelled-create"
# Creating a container through the relay takes 10-40 ms here; cut off after 1-12 ms, a call
# is cut before the relay forwarded it or while containerd creates (which then often goes on
# and makes the container). A call answered before its cut-off is no fault: not counted.
CUT_OFF_SECONDS = (0.001, 0.012)
CUT_OFF = (grpc.StatusCode.CANCELLED, grpc.StatusCode.DEADLINE_EXCEEDED)
STATUS_EVERY = 4  # rounds between checks that also read `resource-enforcer status`
MAX_ROUNDS_PER_FAULT = 2  # a round cuts several calls; this bounds a run that cuts none


@pytest.mark.parametrize("faults", [fault_count(KIND)], ids=count_id)
def test_cancelled_creates(fault_env: EnvFactory, faults: int) -> None:
    env = fault_env(KIND, faults)
    env.start_sentinels()
    rng = env.rng
    injected = 0
    round_ = 0
    while injected < faults and not env.stop_injecting():
        round_ += 1
        if round_ > MAX_ROUNDS_PER_FAULT * faults:
            pytest.fail(
                f"only {injected} of {faults} creates were cut off in {round_ - 1} rounds: "
                f"every call answered within {CUT_OFF_SECONDS[1] * 1000:.0f} ms",
                pytrace=False,
            )
        stage = f"cancelled-create round {round_}"
        cut: list[tuple[RunningPod, grpc.StatusCode]] = []
        # Several pods in a row, most of them Guaranteed ones competing for the one CPU: a
        # CPU released too early by one cut-off create is handed to the next.
        for _ in range(rng.randint(3, 5)):
            if injected >= faults:
                break  # the budget is spent: no pod left without its creation
            qos = GUARANTEED if rng.random() < 0.7 else rng.choice((BURSTABLE, BEST_EFFORT))
            env.figures.tries += 1
            pod = env.node.run_sandbox(env.node.manifest_for(qos))
            if pod is None:
                continue
            code = grpc.StatusCode.OK
            # Cut off once, or again on kubelet's quick retries (an overloaded runtime); the
            # first try is always made, so a pod never goes on without a CreateContainer.
            for attempt_no in range(rng.randint(1, 3)):
                if attempt_no and injected >= faults:
                    break
                mode = rng.choice(("deadline", "cancel"))
                code = env.node.create_cut_off(pod, 0, mode, rng.uniform(*CUT_OFF_SECONDS))
                if code not in CUT_OFF:
                    break  # answered before the cut-off (placed or refused): no fault
                env.figures.fault(f"{mode}, kubelet saw {code.name}")
                injected += 1
            cut.append((pod, code))
        # kubelet's pod workers carry on, each pod with its own reaction.
        for pod, code in cut:
            if code == grpc.StatusCode.OK:
                env.node.start(pod, pod.containers["app"])
            else:
                reaction = rng.choice(list(Reaction))
                env.node.after_failed_create(pod, 0, code, "", reaction)
        env.node.catch_up()
        env.checker.settle(stage, with_status=round_ % STATUS_EVERY == 0)
        env.checker.probe(env.node, stage, keep=False)
    env.finish()
