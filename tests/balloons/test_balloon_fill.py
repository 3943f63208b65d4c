"""Which balloon a container joins: filled as the NRI balloons policy fills them (issue 26,
item 0). Among the balloons of its type: the one with the most free CPU without inflating,
then inflated, then fewest containers, then the first; a new balloon last (first with
preferNewBalloons); same pod and same namespace before all of them."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

from bsupport import balloons, check_invariants, req
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from enforcer.policy import BalloonsPolicy, PlacementError
from enforcer.topology import CPUSet

CONFIG = """
policy:
  name: balloons
  reservedCPUs: 2
  balloonTypes:
    - name: inference
      namespaces: ["ai-*"]
      minCPUs: 4
      maxCPUs: 16
      minBalloons: 2
      preferNewBalloons: false
"""


def pod(name: str, cpu: str) -> str:
    return f"""---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: ai-prod}}
spec:
  containers:
  - {{name: model, image: x, resources: {{requests: {{cpu: "{cpu}"}}}}}}
"""


def test_the_users_case_two_one_cpu_pods_go_to_two_balloons(
    tmp_path: Path, snapshot_roots: dict[str, Path]
) -> None:
    (tmp_path / "c.yaml").write_text(CONFIG)
    pods = [("a", "1"), ("b", "1"), ("c", "1"), ("d", "1"), ("e", "3")]
    (tmp_path / "p.yaml").write_text("".join(pod(n, c) for n, c in pods))
    run = subprocess.run(
        [sys.executable, "-m", "enforcer.cli", "plan", "--config", str(tmp_path / "c.yaml"),
         "--sysfs-root", str(snapshot_roots["2-socket-4-node-40-core"]),
         "--pods", str(tmp_path / "p.yaml")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    rows = {r["pod"]: r for r in json.loads(run.stdout)}
    # The second pod goes where the most CPU is free: the other balloon.
    assert rows["a"]["balloon"] == "inference[0]"
    assert rows["b"]["balloon"] == "inference[1]"
    # Equal free CPU and equal containers: the first balloon, then the other again.
    assert rows["c"]["balloon"] == "inference[0]"
    assert rows["d"]["balloon"] == "inference[1]"
    # 3 CPUs fit neither without inflating (2 CPUs free in each): the one inflated further,
    # equal here, then the first.
    assert rows["e"]["balloon"] == "inference[0]"
    sizes = {r["balloon"]: len(CPUSet.parse(r["cpus"])) for r in rows.values()}
    assert sizes == {"inference[0]": 5, "inference[1]": 4}
    assert not CPUSet.parse(rows["a"]["cpus"]) & CPUSet.parse(rows["b"]["cpus"])


def test_most_free_cpu_first_then_fewest_containers() -> None:
    p = balloons([{"name": "t", "namespaces": ["*"], "minBalloons": 2, "minCPUs": 2}])
    assert p.admit(req("a", 1500)).pool == "t[0]"
    assert p.admit(req("b", 200)).pool == "t[1]"  # 1800m free beats 500m
    assert p.admit(req("c", 300)).pool == "t[1]"  # 1800m beats 500m again
    # t[0] 500m free, 1 container; t[1] 1500m free, 2 containers: free CPU weighs first.
    assert p.admit(req("d", 1000)).pool == "t[1]"
    # Both 500m free now: t[0] has fewer containers.
    assert p.admit(req("e", 100)).pool == "t[0]"


def test_an_existing_balloon_inflated_before_a_new_one_and_the_roomiest_inflated() -> None:
    types = [{"name": "t", "namespaces": ["*"], "minBalloons": 2, "minCPUs": 1, "maxCPUs": 3}]
    p = balloons(types)
    p.admit(req("a", 1000))
    p.admit(req("b", 1000))
    p.admit(req("c", 1500))  # fits neither without inflating: both inflate to 3 at most
    assert p.placement("uid-c/c").pool == "t[0]"  # equal room inflated, equal containers
    # t[0] holds 2500m of 3 CPUs at most, t[1] 1000m: t[1] has more room once inflated.
    assert p.admit(req("d", 1200)).pool == "t[1]"
    # 2000m fits neither even inflated: a new balloon.
    assert p.admit(req("e", 2000)).pool == "t[2]"
    check_invariants(p)


def test_prefer_new_balloons_takes_an_empty_balloon_before_making_one() -> None:
    types = [{"name": "t", "namespaces": ["*"], "minBalloons": 2, "preferNewBalloons": True}]
    p = balloons(types)
    assert p.admit(req("a", 500)).pool == "t[0]"
    assert p.admit(req("b", 500)).pool == "t[1]"  # empty, existing
    assert p.admit(req("c", 500)).pool == "t[2]"  # none empty: a new one
    p.release("uid-b/b")  # 3 balloons, minBalloons 2: the empty t[1] goes
    assert "t[1]" not in {v.name for v in p.balloon_views()}
    assert p.admit(req("d", 1000)).pool == "t[1]"  # a new one, the first free instance


def test_same_namespace_before_a_new_balloon_before_balanced() -> None:
    types = [{"name": "t", "namespaces": ["*"], "minBalloons": 2, "minCPUs": 2,
              "preferPerNamespaceBalloon": True}]  # fmt: skip
    p = balloons(types)
    assert p.admit(req("a", 1500, namespace="x")).pool == "t[0]"
    # Another namespace: an empty balloon, not the one with x's container.
    assert p.admit(req("b", 100, namespace="y")).pool == "t[1]"
    # x again: its namespace's balloon even though t[1] has more free CPU.
    assert p.admit(req("c", 100, namespace="x")).pool == "t[0]"
    # A third namespace, no empty balloon: a new one rather than share.
    assert p.admit(req("d", 100, namespace="z")).pool == "t[2]"


def test_spreading_pods_first_avoids_the_pods_balloons_then_falls_back_to_them() -> None:
    types = [{"name": "t", "namespaces": ["*"], "maxBalloons": 2, "preferSpreadingPods": True}]
    p = balloons(types)
    assert p.admit(req("a", 500, pod="p")).pool == "t[0]"
    assert p.admit(req("b", 500, pod="p")).pool == "t[1]"
    # maxBalloons reached: a balloon with the pod's containers after all, balanced.
    assert p.admit(req("c", 300, pod="p")).pool == "t[0]"
    assert p.admit(req("d", 300, pod="p")).pool == "t[1]"


# ----- property: balanced filling over random churn ----------------------------------------


def _free(p: BalloonsPolicy) -> int:
    used = CPUSet().union(*(v.cpus for v in p.balloon_views() if v.type != "reserved"))
    return len(p.available - p.reserved - used)


def _expected(p: BalloonsPolicy, milli: int) -> tuple[str, list[tuple[str, int, int]]]:
    """What the peer's chain says, from what `plan` and `status` show: ('balanced' | 'inflate'
    | 'new', the candidates as (name, free milli, containers))."""
    btype = p.types["t"]
    free = _free(p)
    fits, inflates = [], []
    for v in p.balloon_views():
        if v.type != "t":
            continue
        size = max(btype.minCPUs, math.ceil((v.milli + milli) / 1000), 1)
        if (btype.maxCPUs and size > btype.maxCPUs) or size - len(v.cpus) > free:
            continue
        most = len(v.cpus) + free
        most = min(most, btype.maxCPUs) if btype.maxCPUs else most
        n = len(v.containers)
        if len(v.cpus) * 1000 - v.milli >= milli:
            fits.append((v.name, len(v.cpus) * 1000 - v.milli, n))
        inflates.append((v.name, most * 1000 - v.milli, n))
    if fits:
        return "balanced", fits
    if inflates:
        return "inflate", inflates
    return "new", []


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    min_balloons=st.integers(1, 3),
    min_cpus=st.integers(0, 3),
    max_cpus=st.sampled_from([0, 3, 5]),
    ops=st.lists(
        st.tuples(st.booleans(), st.integers(0, 9), st.sampled_from([0, 100, 500, 1000, 2500])),
        max_size=30,
    ),
)
def test_each_container_goes_where_the_most_cpu_is_free(
    min_balloons: int, min_cpus: int, max_cpus: int, ops: list[tuple[bool, int, int]]
) -> None:
    """Every container of its own pod, one namespace, preferNewBalloons false: it joins a
    balloon that takes it without inflating when one can, the one with the most free CPU and,
    among those, the fewest containers; else the one with the most room once inflated; a new
    balloon only when no existing one can take it."""
    types = [{"name": "t", "namespaces": ["*"], "minBalloons": min_balloons,
              "minCPUs": min_cpus, "maxCPUs": max_cpus}]  # fmt: skip
    p = balloons(types)
    live: set[str] = set()
    for admit, c, milli in ops:
        name = f"c{c}"
        key = f"uid-{name}/{name}"
        if not admit or key in live:
            if key in live:
                p.release(key)
                live.discard(key)
            continue
        how, candidates = _expected(p, milli)
        before = {v.name for v in p.balloon_views()}
        try:
            chosen = p.admit(req(name, milli)).pool
        except PlacementError:
            assert how == "new", f"refused while {candidates} could take {milli}m"
            continue
        live.add(key)
        if how == "new":
            assert chosen not in before, f"{milli}m joined {chosen}, which could not take it"
        else:
            best = max(free for _, free, _ in candidates)
            fewest = min(n for _, free, n in candidates if free == best)
            winners = {name for name, free, n in candidates if free == best and n == fewest}
            assert chosen in winners, f"{how}: {milli}m went to {chosen}, not {winners}"
        check_invariants(p)
