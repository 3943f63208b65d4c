"""Checks shared by the real-runtime modules: a container's cpuset read from its real cgroup,
and a bounded wait for a condition.

The wait's deadline catches a condition that never comes; it is never a speed limit: it is
generous (30 s by default, stretched by ``KRE_TIMEOUT_SCALE``), because a loaded CI machine is
slower than a developer's and a test must not fail by timing alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from enforcer.topology import CPUSet
from tests.support.kubelet import RunningPod
from tests.support.slow import scaled


def cpus_of(pod: RunningPod, container: str = "app") -> CPUSet:
    """The cpuset of the pod's ``container``, read from its real cgroup."""
    return CPUSet.parse(Path(pod.cgroup_path("cpuset", container), "cpuset.cpus").read_text())


def wait_for(
    predicate: Callable[[], object], timeout: float = 30.0, why: Callable[[], str] = lambda: ""
) -> None:
    """Polls ``predicate`` until it holds; AssertionError with ``why()`` when it does not within
    ``timeout`` seconds (scaled)."""
    deadline = time.monotonic() + scaled(timeout)
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met in time\n{why()}")
        time.sleep(0.05)
