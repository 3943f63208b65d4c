"""Helpers for the balloons tests: requests, policies and the invariants every state keeps."""

from __future__ import annotations

import math
from typing import Any

from enforcer.decode import ContainerRequest, Preferences
from enforcer.policy import BalloonsPolicy, make_policy
from enforcer.topology import CPUSet, Topology
from resource_contract.config import parse_config

# 2 sockets x 2 NUMA nodes x 2 cores x 2 threads, numbered as Linux does:
#   socket0: node0 = cores {0,8} {1,9}      node1 = cores {2,10} {3,11}
#   socket1: node2 = cores {4,12} {5,13}    node3 = cores {6,14} {7,15}
MACHINE = Topology.synthetic(sockets=2, nodes_per_die=2, cores_per_node=2)


def req(
    name: str,
    milli: int = 0,
    *,
    pod: str | None = None,
    namespace: str = "ns",
    balloon: str | None = None,
    qos: str = "Burstable",
    **prefs: bool,
) -> ContainerRequest:
    pod = pod or name
    return ContainerRequest(
        pod_uid=f"uid-{pod}",
        pod_name=pod,
        namespace=namespace,
        container=name,
        qos=qos,  # type: ignore[arg-type]
        cpu_request_milli=milli,
        cpu_limit_milli=milli if qos == "Guaranteed" else 0,
        balloon=balloon,
        preferences=Preferences(**prefs),
    )


def key(name: str, pod: str | None = None) -> str:
    return f"uid-{pod or name}/{name}"


def balloons(
    types: list[dict[str, Any]],
    topology: Topology = MACHINE,
    reserved: str | int = "0,8",
    cpu_classes: dict[str, Any] | None = None,
    **policy: Any,
) -> BalloonsPolicy:
    config = parse_config(
        {
            "policy": {
                "name": "balloons",
                "reservedCPUs": reserved,
                "balloonTypes": types,
                **policy,
            },
            "cpuClasses": cpu_classes or {},
        }
    )
    made = make_policy(topology, config.policy)
    assert isinstance(made, BalloonsPolicy)
    return made


def by_name(p: BalloonsPolicy) -> dict[str, CPUSet]:
    return {v.name: v.cpus for v in p.balloon_views()}


def check_invariants(p: BalloonsPolicy) -> None:
    """No CPU in two balloons; every balloon within its type's bounds and big enough for its
    containers' requests; every type within its balloon counts; containers on their balloon."""
    seen = CPUSet()
    counts: dict[str, int] = {}
    for view in p.balloon_views():
        assert not (view.cpus & seen), f"{view.name} shares CPUs {view.cpus & seen}"
        seen |= view.cpus
        assert view.cpus <= p.available
        counts[view.type] = counts.get(view.type, 0) + 1
        if view.type == "reserved":
            assert view.cpus == p.reserved
            continue
        btype = p.types[view.type]
        size = len(view.cpus)
        assert size >= btype.minCPUs, f"{view.name}: {size} < minCPUs {btype.minCPUs}"
        assert not btype.maxCPUs or size <= btype.maxCPUs, f"{view.name}: {size} > maxCPUs"
        assert size >= math.ceil(view.milli / 1000), f"{view.name}: too small for {view.milli}m"
        assert size >= (1 if view.containers else 0)
        assert not (view.cpus & p.reserved)
        for k in view.containers:
            placement = p.placement(k)
            assert placement.pool == view.name
            assert view.cpus <= placement.cpus
            assert not (placement.cpus - view.cpus - view.shared_idle)
    for name, btype in p.types.items():
        if name == "reserved":
            continue
        count = counts.get(name, 0)
        assert count >= btype.minBalloons, f"{name}: {count} < minBalloons"
        assert not btype.maxBalloons or count <= btype.maxBalloons, f"{name}: > maxBalloons"
