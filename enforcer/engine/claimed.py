"""Prepared DRA claims in the engine: each is a held decision of its own in the registry.

A claim prepared on this node (`enforcer.dra`) becomes a policy entry of kind `held` under the
key `dra/<claim uid>`, with the claim's CPUs as its exclusive CPUs: every policy already keeps
held CPUs out of its shared pools and out of every exclusive allocation, the registry saves it
with the other decisions (state file, journal), and a restart or a reconfiguration holds it
again before any container is placed (`split_claims` / `hold_saved`). Unpreparing releases it
and the shared pools grow back.

A container that names a claim (`ContainerCreate.dra_claims`) is admitted on the shared pool
(`prefer shared`: it takes no exclusive CPUs of the policy's), marked `source = dra:<uids>`,
and pinned to its claims' CPUs and their memory nodes instead of its placement (`pinning_of`);
the classes of the claim's configuration ride on it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from enforcer.decode import ContainerCreate, ContainerRequest, DecodeError
from enforcer.decode.dra_claims import CLAIM_SOURCE
from enforcer.policy import Admitted, Policy
from enforcer.refusal import Reason
from enforcer.topology import CPUSet, Topology

CLAIM_POD = "dra"  # the pod uid of a claim's own entry: key "dra/<claim uid>"
CONTAINER_SOURCE = "dra:"  # + the uids, comma-separated


def claim_key(uid: str) -> str:
    return f"{CLAIM_POD}/{uid}"


def is_claim(admitted: Admitted) -> bool:
    return admitted.request.source == CLAIM_SOURCE and admitted.kind == "held"


def claim_request(
    uid: str,
    namespace: str,
    name: str,
    *,
    rdt_class: str | None = None,
    blockio_class: str | None = None,
    cpu_class: str | None = None,
) -> ContainerRequest:
    """The claim's own entry: who it is (for `status` and holder messages) and its classes."""
    return ContainerRequest(
        pod_uid=CLAIM_POD,
        pod_name=name,
        namespace=namespace,
        container=uid,
        qos="Guaranteed",
        source=CLAIM_SOURCE,
        rdt_class=rdt_class,
        blockio_class=blockio_class,
        cpu_class=cpu_class,
    )


def claims(policy: Policy) -> dict[str, Admitted]:
    """Claim uid -> its held entry."""
    return {a.request.container: a for a in policy.admitted.values() if is_claim(a)}


def holders(policy: Policy) -> dict[int, str]:
    """CPU -> who holds it exclusively: `claim ns/name` or `container ns/pod/container`."""
    out: dict[int, str] = {}
    for admitted in policy.admitted.values():
        req = admitted.request
        if is_claim(admitted):
            who = f"claim {req.namespace}/{req.pod_name}"
        else:
            who = f"container {req.namespace}/{req.pod_name}/{req.container}"
        for cpu in admitted.exclusive:
            out.setdefault(cpu, who)
    return out


def hold(policy: Policy, request: ContainerRequest, cpus: CPUSet) -> None:
    """Holds `cpus` for a claim; ValueError when the policy could not hold all of them (taken
    meanwhile): the caller's registry change is rolled back."""
    taken = holders_except(policy, request.key)
    if busy := CPUSet(c for c in cpus if c in taken):
        who = sorted({taken[c] for c in busy})
        raise ValueError(
            f"claim {request.namespace}/{request.pod_name}: CPUs {busy} are held by "
            f"{', '.join(who)}"
        )
    policy.hold(request, cpus)
    got = policy.admitted[request.key].exclusive
    if got != cpus:
        raise ValueError(
            f"claim {request.namespace}/{request.pod_name}: CPUs {cpus - got} could not be held "
            "(reserved or not available)"
        )


def holders_except(policy: Policy, key: str) -> dict[int, str]:
    admitted = policy.admitted.get(key)
    out = holders(policy)
    if admitted is not None:
        for cpu in admitted.exclusive:
            out.pop(cpu, None)
    return out


def split_claims(state: Mapping[str, Any]) -> tuple[list[Admitted], dict[str, Any]]:
    """A saved policy state's claims, and the state without them (for `Policy.restore`, which
    places containers: a claim is held again as it was, never placed)."""
    found: list[Admitted] = []
    rest: list[Any] = []
    for data in state.get("admitted", []) or []:
        try:
            admitted = Admitted.from_dict(data)
        except (KeyError, TypeError, ValueError, AttributeError):
            rest.append(data)  # the policy reports it
            continue
        if is_claim(admitted):
            found.append(admitted)
        else:
            rest.append(data)
    return found, {**state, "admitted": rest}


def hold_saved(policy: Policy, saved: Iterable[Admitted]) -> list[str]:
    """Holds saved claims again, before the containers are placed; returns what could not be
    held (CPUs gone from the machine or now reserved)."""
    problems = []
    for admitted in saved:
        cpus = admitted.exclusive & (policy.available - policy.reserved)
        try:
            hold(policy, admitted.request, cpus)
        except ValueError as exc:
            problems.append(str(exc))
            continue
        if cpus != admitted.exclusive:
            problems.append(
                f"claim {admitted.request.namespace}/{admitted.request.pod_name}: CPUs "
                f"{admitted.exclusive - cpus} are no longer available here; it keeps {cpus}"
            )
    return problems


def for_container(policy: Policy, create: ContainerCreate, wanted: ContainerRequest) -> Any:
    """The request of a container that names claims: on the shared pool (no exclusive CPUs of
    the policy), marked with its claims, with the claims' classes. DecodeError naming the claim
    when one is not prepared here (kubelet prepares before it creates: a stale or forged name)."""
    if not create.dra_claims:
        return wanted
    held = claims(policy)
    missing = [uid for uid in create.dra_claims if uid not in held]
    if missing:
        raise DecodeError(
            Reason.UNAVAILABLE,
            f"{create.namespace}/{create.pod_name} container {create.container}: DRA claim "
            f"{missing[0]} is not prepared on this node",
        )
    changes: dict[str, Any] = {}
    for uid in create.dra_claims:
        req = held[uid].request
        for name in ("rdt_class", "blockio_class", "cpu_class"):
            if getattr(req, name) is not None:
                changes[name] = getattr(req, name)
    return replace(
        wanted,
        source=CONTAINER_SOURCE + ",".join(create.dra_claims),
        preferences=replace(wanted.preferences, shared=True),
        **changes,
    )


def pinning_of(
    policy: Policy, topology: Topology, request: ContainerRequest
) -> tuple[CPUSet, CPUSet] | None:
    """(cpus, mems) of a container of claims: its claims' CPUs and their memory nodes; None
    for any other container, or when none of its claims is prepared any more."""
    if not request.source.startswith(CONTAINER_SOURCE):
        return None
    held = claims(policy)
    cpus = CPUSet()
    for uid in request.source[len(CONTAINER_SOURCE) :].split(","):
        if uid in held:
            cpus = cpus | held[uid].exclusive
    if not cpus:
        return None
    return cpus, topology.memory_nodes_of_cpus(cpus)


def shown_as(
    policy: Policy, admitted: Admitted
) -> tuple[str, str, CPUSet | None, CPUSet | None, CPUSet]:
    """(kind, pool, cpus, mems, exclusive CPUs) of an admitted entry for `status`: its
    placement's; a prepared claim is of kind `claim` (pool `dra`) with its CPUs and their memory
    nodes; a container of claims of kind `claimed`, on its claims' CPUs and memory nodes, which
    it shares with nobody but the claims' other containers."""
    p = policy.placement(admitted.request.key)
    if is_claim(admitted):
        mems = policy.topology.memory_nodes_of_cpus(admitted.exclusive)
        return "claim", CLAIM_POD, p.cpus, mems, p.exclusive
    if pinned := pinning_of(policy, policy.topology, admitted.request):
        return "claimed", CLAIM_POD, pinned[0], pinned[1], pinned[0]
    return p.kind, p.pool, p.cpus, p.mems, p.exclusive
