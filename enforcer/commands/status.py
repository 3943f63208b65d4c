"""`resource-enforcer status`: the allocations recorded in a state folder, running or not, as a
table (the default) or as one JSON document."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from enforcer.engine import ContainerView, Entry, claimed, views_of
from enforcer.policy import Policy, make_policy
from enforcer.state import StateError, StateStore, check_saved
from enforcer.topology import CPUSet, Topology
from enforcer.views import cpu_cells, cpu_classes_by_name, placements_report
from resource_contract.config import ConfigError
from resource_contract.policy_config import PolicyConfig


def status(state_dir: str, output: str = "table") -> int:
    store = StateStore(state_dir)
    unwritable = folder_problem(store.dir)
    if unwritable:
        print(
            f"warning: the state folder {store.dir} cannot be written ({unwritable}): the "
            "enforcer refuses new containers and resizes until it can; what follows is the "
            "state as last saved",
            file=sys.stderr,
        )
    try:
        saved = store.load(move_aside=False)  # a read-only look: never moves the file
    except StateError as exc:
        print(f"cannot use the state: {exc}", file=sys.stderr)
        return 1
    if saved is None:
        print(
            f"no state in {store.path}: the enforcer has not run with this --state-dir",
            file=sys.stderr,
        )
        return 1
    checked = check_saved(saved, read_container=Entry.from_dict, paired=False)
    for damage in checked.damage:
        print(f"warning: state file {store.path}: {damage}", file=sys.stderr)
    if checked.dropped:
        print(f"warning: not shown: {checked.lost}", file=sys.stderr)
    try:
        topology = Topology.from_dict(saved["topology"])
        policy = make_policy(topology, PolicyConfig.model_validate(saved.get("policyConfig", {})))
    except (ConfigError, KeyError, TypeError, ValueError, AttributeError) as exc:
        print(
            f"cannot use the state: {store.path}: its topology or policy configuration is "
            f"damaged ({type(exc).__name__}: {exc})".replace("\n", " "),
            file=sys.stderr,
        )
        return 1
    # As the engine restores: prepared DRA claims held first, then the containers placed.
    held, rest = claimed.split_claims(checked.policy)
    for problem in claimed.hold_saved(policy, held):
        print(f"warning: {problem}", file=sys.stderr)
    policy.restore(rest)
    entries = [Entry.from_dict(e) for e in checked.containers]
    rows = views_of(policy, {e.key: e for e in entries})
    if output == "json":
        print(json.dumps(status_document(topology, policy, rows), indent=2))
        return 0
    print(f"policy {policy.name}; {topology.describe()}")
    claimed_cpus = claimed_of(policy)
    print(
        f"available {policy.available}; reserved {policy.reserved or 'none'}; "
        f"exclusive {policy.taken - claimed_cpus or 'none'}; claimed (DRA) {claimed_cpus or 'none'}"
    )
    print()
    print(placements_report(topology, policy, rows))
    return 0


def folder_problem(folder: Path) -> str | None:
    """Why the enforcer could not write in `folder`, seen without writing there (None: it
    could, as far as can be told)."""
    try:
        fs = os.statvfs(folder)
    except OSError:
        return None  # no folder: `load` says so
    if fs.f_flag & os.ST_RDONLY:
        return "Read-only file system (EROFS)"
    # The enforcer runs as root: another user's lack of permission says nothing about it.
    if os.geteuid() == 0 and not os.access(folder, os.W_OK):
        return "Permission denied (EACCES)"
    if fs.f_blocks and fs.f_bfree == 0:
        return "No space left on device (ENOSPC)"
    return None


def status_document(topology: Topology, policy: Policy, rows: list[ContainerView]) -> dict:
    """What the table shows, as data: cpusets in Linux list format ("" for none)."""
    cells = cpu_cells(
        topology,
        rows,
        reserved=policy.reserved,
        available=policy.available,
        reserved_shared=policy.reserved_shared,
    )
    return {
        "policy": policy.name,
        "topology": topology.describe(),
        "availableCPUs": str(policy.available),
        "reservedCPUs": str(policy.reserved),
        "exclusiveCPUs": str(policy.taken - claimed_of(policy)),
        "claimedCPUs": str(claimed_of(policy)),
        "claims": [
            {
                "namespace": a.request.namespace,
                "name": a.request.pod_name,
                "uid": uid,
                "cpus": str(a.exclusive),
                "mems": str(topology.memory_nodes_of_cpus(a.exclusive)),
                "rdtClass": a.request.rdt_class,
                "blockioClass": a.request.blockio_class,
                "cpuClass": a.request.cpu_class,
                "containers": sorted(
                    f"{r.namespace}/{r.pod}/{r.container}"
                    for r in rows
                    if r.kind == "claimed" and uid in claimed_uids(policy, r.key)
                ),
            }
            for uid, a in sorted(claimed.claims(policy).items())
        ],
        "containers": [
            _container(r) for r in sorted(rows, key=lambda r: (r.namespace, r.pod, r.container))
        ],
        "pools": [
            {
                "name": p.name,
                "depth": p.depth,
                "cpus": str(p.cpus),
                "sharedCPUs": str(p.shared),
                "exclusiveCPUs": str(p.exclusive),
                "free": p.free,
                "sharedMilliCPU": p.shared_milli,
                "containers": p.containers,
                "mems": str(p.mems),
                "memoryCapacityBytes": p.memory_capacity,
                "memoryUsedBytes": p.memory_used,
            }
            for p in policy.pools()
        ],
        "cpus": [
            {
                "cpu": c.cpu,
                "socket": c.socket,
                "node": c.node,
                "core": c.core,
                "isolated": c.isolated,
                "use": c.use,
                "holder": c.holder,
                "runsShared": c.runs_shared,
            }
            for c in cells
        ],
        "memoryOnlyNodes": list(topology.memory_only_nodes()),
        "balloons": balloons_document(policy),
        "cpuClasses": [
            {"name": name, "cpus": str(cpus)}
            for name, cpus in cpu_classes_by_name(policy.cpu_classes()).items()
        ],
    }


def claimed_of(policy: Policy) -> CPUSet:
    """The CPUs held by prepared DRA claims."""
    return CPUSet().union(*(a.exclusive for a in claimed.claims(policy).values()))


def claimed_uids(policy: Policy, key: str) -> list[str]:
    """The uids of the claims a container of claims names (none for any other)."""
    source = policy.admitted[key].request.source
    if not source.startswith(claimed.CONTAINER_SOURCE):
        return []
    return source[len(claimed.CONTAINER_SOURCE) :].split(",")


def balloons_document(policy: Policy) -> list[dict[str, Any]]:
    """The balloons policy's balloons (empty under other policies)."""
    return [
        {
            "name": b.name,
            "type": b.type,
            "instance": b.instance,
            "cpus": str(b.cpus),
            "requestedMilliCPU": b.milli,
            "idleCPUsShared": str(b.shared_idle),
            "cpuClass": b.cpu_class,
            "containers": sorted(
                f"{r.namespace}/{r.pod_name}/{r.container}"
                for r in (policy.admitted[k].request for k in b.containers if k in policy.admitted)
            ),
        }
        for b in policy.balloon_views()
    ]


def _container(r: ContainerView) -> dict[str, Any]:
    return {
        "namespace": r.namespace,
        "pod": r.pod,
        "container": r.container,
        "containerID": r.container_id,
        "qos": r.qos,
        "kind": r.kind,
        "pool": r.pool,
        "cpus": r.cpus,
        "mems": r.mems,
        "exclusiveCPUs": r.exclusive,
        "rdtClass": r.rdt_class,
        "blockioClass": r.blockio_class,
        "cpuClass": r.cpu_class,
        "devices": r.devices,
        "phase": r.phase or None,
        "problem": r.problem,
    }
