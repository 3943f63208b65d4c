"""Affinities between containers: what affinity rules can ask about a container, and which
placed containers pull (or push) a new one."""

from __future__ import annotations

from collections.abc import Mapping

from enforcer.decode import ContainerRequest
from enforcer.policy.model import Admitted
from enforcer.policy.pool_tree import Pool
from resource_contract.affinity import Subject, weight_towards


def subject_of(request: ContainerRequest) -> Subject:
    """What affinity rules can ask about a container."""
    return Subject(
        request.container,
        request.namespace,
        request.qos,
        request.pod_name,
        request.pod_uid,
        dict(request.labels),
    )


def attraction(
    request: ContainerRequest,
    admitted: Mapping[str, Admitted],
    pod: Mapping[str, int],
    pools: Mapping[str, Pool],
) -> list[tuple[int, int]]:
    """(pool index, weight) of the containers `request` has an affinity for: those its
    affinity annotations name, with their weights; without any, its pod's other containers
    (`pod`: key -> pool index), weight 1 each (containers of a pod stay close)."""
    if not request.affinity:
        return [(i, 1) for key, i in pod.items() if key != request.key]
    me = subject_of(request)
    out = []
    for key, entry in admitted.items():
        pool = pools.get(entry.pool)
        if key == request.key or pool is None:
            continue
        weight = weight_towards(request.affinity, me, subject_of(entry.request))
        if weight:
            out.append((pool.index, weight))
    return out
