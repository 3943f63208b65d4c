"""A create/start/remove churn of the emulated kubelet, with a fault fired at a random moment
of it: Guaranteed 1-CPU pods competing for the one exclusive CPU, Burstable and BestEffort pods
coming and going on the shared pool, pods removed.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

from tests.faults.cri_calls import Reaction
from tests.faults.node import Node
from tests.support.kubelet_sends import BEST_EFFORT, BURSTABLE, GUARANTEED

MAX_SHARED = 4  # churned shared pods at most, besides the sentinels
BACKOFF_SECONDS = 0.2


def churn_step(node: Node, rng: random.Random) -> None:
    """One step of kubelet's work: start a Guaranteed or a shared pod, or remove one."""
    guaranteed = node.of_qos(GUARANTEED)
    shared = [p for p in node.removable() if p.qos != GUARANTEED]
    reaction = rng.choice(list(Reaction))
    r = rng.random()
    outcome = None
    if r < 0.35:
        outcome = node.start_pod(node.manifest_for(GUARANTEED), reaction)
    elif r < 0.6 and len(shared) < MAX_SHARED:
        outcome = node.start_pod(node.manifest_for(rng.choice((BURSTABLE, BEST_EFFORT))), reaction)
    elif guaranteed and r < 0.85:
        node.remove_pod(rng.choice(guaranteed))
    elif shared:
        node.remove_pod(rng.choice(shared))
    else:
        outcome = node.start_pod(node.manifest_for(BEST_EFFORT), reaction)
    if outcome is not None and not outcome.started:
        time.sleep(BACKOFF_SECONDS)  # kubelet's back-off before the pod worker tries again


def churn_with_fault(
    node: Node,
    rng: random.Random,
    fault: Callable[[], None],
    delay: float,
    *,
    workers: int = 2,
    after: int = 2,
) -> int:
    """Churns with `workers` parallel pod workers (as kubelet's are) while a thread fires
    `fault` `delay` seconds in; each worker then takes `after` steps more (kubelet carrying on
    once the fault is over). Returns the steps taken; the fault's exception, if any, is raised
    here. Each worker draws from its own generator, seeded from `rng`."""
    errors: list[BaseException] = []
    faulted = threading.Event()
    steps = [0] * workers

    def fire() -> None:
        time.sleep(delay)  # a random point of the churn, seeded
        try:
            fault()
        except BaseException as exc:  # re-raised in the calling thread
            errors.append(exc)
        finally:
            faulted.set()

    def work(index: int, own: random.Random) -> None:
        try:
            while not faulted.is_set():
                churn_step(node, own)
                steps[index] += 1
            for _ in range(after):
                churn_step(node, own)
                steps[index] += 1
        except BaseException as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=work, args=(i, random.Random(rng.random())), daemon=True)
        for i in range(workers)
    ]
    trigger = threading.Thread(target=fire, name="fault", daemon=True)
    for t in (*threads, trigger):
        t.start()
    for t in (trigger, *threads):
        t.join()
    if errors:
        raise errors[0]
    return sum(steps)
