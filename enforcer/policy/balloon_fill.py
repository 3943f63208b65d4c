"""Which balloon of a type a container joins: the NRI balloons policy's fill chain.

The peer (containers/nri-plugins, `allocateBalloonOfDef`) tries fill methods in order and takes
the first that offers a balloon:

1. `same-pod` (unless `preferSpreadingPods`): a balloon holding a container of the same pod;
2. `same-namespace`, then `new-balloon` (with `preferPerNamespaceBalloon`): a balloon holding a
   container of the same namespace, else a new balloon;
3. `balanced`, `balanced-inflate`, `new-balloon`; with `preferNewBalloons`, `new-balloon` first.

`balanced` offers the balloons that take the container without inflating, `balanced-inflate`
those that take it inflated as far as `maxCPUs` and the free CPUs allow. Among the balloons a
method offers, the one with the most free CPU wins (free without inflating; inflated for
`balanced-inflate`), then the one with the fewest containers, then the first in the policy's
list (creation order). `new-balloon` takes an existing balloon without containers first, the
first in the list, and makes a new one only when there is none.

One difference, documented in docs/policies.md: with `preferSpreadingPods` every method first
leaves out the balloons that hold a container of the same pod, and `balanced` and
`balanced-inflate` come back at the end with them in: the peer's documentation promises that
"containers from the same pod prefer different balloons", which its chain alone does not do
unless `preferNewBalloons` is also set.

Pure: plain values in, a choice out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from enforcer.decode import ContainerRequest
from enforcer.policy.affinity import subject_of
from enforcer.topology import CPUSet
from resource_contract.affinity import weight_towards

FillMethod = Literal["same-pod", "same-namespace", "new-balloon", "balanced", "balanced-inflate"]


@dataclass(frozen=True)
class Instance:
    """What the fill chain knows of one existing balloon of the type that can take the
    container (inflated if need be)."""

    index: int  # position in the policy's list of balloons: the last tie-breaker
    cpus: int
    milli: int  # CPU requested by its containers
    containers: int
    max_cpus: int  # its CPUs inflated as far as maxCPUs and the free CPUs allow
    same_pod: bool  # holds a container of the container's pod
    same_namespace: bool  # holds a container of the container's namespace

    def free(self) -> int:
        """Milli-CPU free without inflating."""
        return self.cpus * 1000 - self.milli

    def max_free(self) -> int:
        """Milli-CPU free once inflated as far as it can be."""
        return self.max_cpus * 1000 - self.milli


@dataclass(frozen=True)
class Step:
    method: FillMethod
    avoid_pod: bool = False  # leave out balloons holding a container of the same pod


NEW = "new"  # choose(): make a new balloon


def fill_chain(
    *, prefer_spreading_pods: bool, prefer_per_namespace: bool, prefer_new: bool
) -> list[Step]:
    """The fill methods in the order the peer tries them for a type with these options."""
    methods: list[FillMethod] = []
    if not prefer_spreading_pods:
        methods.append("same-pod")
    if prefer_per_namespace:
        methods += ["same-namespace", "new-balloon"]
    if prefer_new:
        methods += ["new-balloon", "balanced", "balanced-inflate"]
    else:
        methods += ["balanced", "balanced-inflate", "new-balloon"]
    if not prefer_spreading_pods:
        return [Step(m) for m in methods]
    return [Step(m, avoid_pod=True) for m in methods] + [
        Step("balanced"),
        Step("balanced-inflate"),
    ]


def choose(
    chain: Sequence[Step], instances: Sequence[Instance], milli: int, *, new_possible: bool
) -> Instance | str | None:
    """The balloon the container joins: an Instance, NEW for a new balloon, or None when no
    method offers anything. `instances` are the type's balloons that can take the container,
    in the policy's list order; `new_possible`: a new balloon could be made and take it."""
    for step in chain:
        offered = [i for i in instances if not (step.avoid_pod and i.same_pod)]
        if step.method == "new-balloon":
            empty = [i for i in offered if i.containers == 0]
            if empty:
                return min(empty, key=lambda i: i.index)
            if new_possible:
                return NEW
            continue
        if step.method == "same-pod":
            offered = [i for i in offered if i.same_pod]
        elif step.method == "same-namespace":
            offered = [i for i in offered if i.same_namespace]
        elif step.method == "balanced":
            offered = [i for i in offered if i.free() >= milli]
        if not offered:
            continue
        if step.method == "balanced-inflate":
            return min(offered, key=lambda i: (-i.max_free(), i.containers, i.index))
        return min(offered, key=lambda i: (-i.free(), i.containers, i.index))
    return None


def ranked(
    request: ContainerRequest,
    members: Sequence[ContainerRequest],
    balloon: tuple[str, int, CPUSet, int, int, int],
    keep: CPUSet | None,
    hint: str | None,
) -> tuple[tuple[int, ...], Instance]:
    """(what only we weigh, lower first; what the fill chain weighs) for one balloon that can
    take `request`: the balloon it was in before a restart, then the one whose CPUs it runs
    on, then where its affinity rules pull it (positive) or push it (negative).

    `balloon`: its name, index in the policy's list, CPUs, CPUs once inflated as far as it can
    be, milli-CPU requested and number of containers; `members`: its containers' requests."""
    name, index, cpus, max_cpus, milli, containers = balloon
    attraction = 0
    if request.affinity:
        me = subject_of(request)
        attraction = sum(weight_towards(request.affinity, me, subject_of(m)) for m in members)
    ours = (0 if name == hint else 1, -len(cpus & keep) if keep else 0, -attraction)
    instance = Instance(
        index=index,
        cpus=len(cpus),
        milli=milli,
        containers=containers,
        max_cpus=max_cpus,
        same_pod=any(m.pod_uid == request.pod_uid for m in members),
        same_namespace=any(m.namespace == request.namespace for m in members),
    )
    return ours, instance


# What a new balloon weighs in `ranked`'s first part: never where the container was, nor
# where it runs, and no rule pulls towards it.
NEW_RANK = (1, 0, 0)
