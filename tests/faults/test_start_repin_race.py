"""Fault: StartContainer of shared containers racing the re-pin that another container's
admission (the shared pool shrinks) or removal (it grows) makes of them."""

from __future__ import annotations

import functools
import random
import threading
import time
from collections.abc import Callable

import grpc
import pytest

from tests.faults.conftest import EnvFactory
from tests.faults.cri_calls import Reaction
from tests.faults.env import FaultEnv
from tests.faults.settings import count_id, fault_count
from tests.support.kubelet import RunningPod
from tests.support.kubelet_sends import BEST_EFFORT, BURSTABLE, GUARANTEED

KIND = "start-repin-race"
RACERS = 3  # shared containers started in each race
STAGGER_SECONDS = 0.03  # each party of a race waits a random part of this after the barrier


def created_shared(env: FaultEnv, count: int) -> list[tuple[RunningPod, str]]:
    """Shared pods with their container created, not started."""
    made = []
    for _ in range(count):
        env.figures.tries += 1
        qos = env.rng.choice((BURSTABLE, BEST_EFFORT))
        pod = env.node.run_sandbox(env.node.manifest_for(qos, "race-"))
        if pod is None:
            continue
        try:
            made.append((pod, env.node.create(pod, 0)))
        except grpc.RpcError:
            env.node.remove_pod(pod)
    return made


def race(
    rng: random.Random, starts: list[Callable[[], object]], other: Callable[[], object]
) -> None:
    """Runs every start and `other` at once, each after its own random stagger."""
    parties = [*starts, other]
    barrier = threading.Barrier(len(parties))
    delays = [rng.uniform(0, STAGGER_SECONDS) for _ in parties]
    errors: list[BaseException] = []

    def run(action: Callable[[], object], delay: float) -> None:
        try:
            barrier.wait(10)
            time.sleep(delay)
            action()
        except BaseException as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=run, args=(a, d), daemon=True)
        for a, d in zip(parties, delays, strict=True)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    if errors:
        raise errors[0]


def start_all(env: FaultEnv, created: list[tuple[RunningPod, str]]) -> list[Callable[[], object]]:
    return [functools.partial(env.node.start_created, cid) for _, cid in created]


def remove_pods(env: FaultEnv, pods: list[RunningPod]) -> None:
    for pod in pods:
        env.node.remove_pod(pod)


def finish_starts(env: FaultEnv, created: list[tuple[RunningPod, str]]) -> None:
    """kubelet retries a start that failed in the race."""
    for pod, cid in created:
        if env.node.kubelet.container_status(cid).state == 0:  # still created
            env.node.start(pod, cid)


@pytest.mark.parametrize("faults", [fault_count(KIND)], ids=count_id)
def test_start_racing_a_repin(fault_env: EnvFactory, faults: int) -> None:
    env = fault_env(KIND, faults)
    env.start_sentinels()
    injected = 0
    round_ = 0
    while injected < faults and not env.stop_injecting():
        round_ += 1
        # The pool shrinks: a Guaranteed pod's admission takes the free CPU while shared
        # containers start (its sandbox made beforehand, so the create itself races).
        env.node.remove_all(GUARANTEED)
        holder = env.node.run_sandbox(env.node.manifest_for(GUARANTEED, "holder-"))
        assert holder is not None, "RunPodSandbox keeps failing"
        created = created_shared(env, RACERS)
        env.figures.tries += 1

        def admit(holder: RunningPod = holder) -> None:
            try:
                cid = env.node.create(holder, 0)
            except grpc.RpcError as exc:
                env.node.after_failed_create(
                    holder, 0, exc.code(), exc.details() or "", Reaction.RETRY_SAME
                )
                return
            env.node.start(holder, cid)

        race(env.rng, start_all(env, created), admit)
        for _ in created:
            env.figures.fault("start vs. shrinking pool")
        injected += len(created)
        finish_starts(env, created)
        stage = f"race round {round_}, pool shrunk"
        env.checker.settle(stage, with_status=round_ % 2 == 0)
        if not env.node.of_qos(GUARANTEED):
            # Refused with no Guaranteed container running: the leak probe says whether that
            # refusal lasts, and its pod becomes the holder.
            env.checker.probe(env.node, stage, keep=True)
        # The pool grows: the holder is removed while more shared containers start.
        created = created_shared(env, RACERS)
        holders = env.node.of_qos(GUARANTEED)
        race(
            env.rng,
            start_all(env, created),
            functools.partial(remove_pods, env, holders),
        )
        for _ in created:
            env.figures.fault("start vs. growing pool")
        injected += len(created)
        finish_starts(env, created)
        stage = f"race round {round_}, pool grown"
        env.checker.settle(stage, with_status=round_ % 2 == 1)
        for pod in env.node.removable():
            if pod.name.startswith("race-"):
                env.node.remove_pod(pod)
    env.finish()
