"""`resource-enforcer status`: the allocations recorded in a state folder, running or not, as a
table (the default) or as one JSON document."""

from __future__ import annotations

import json
import sys
from typing import Any

from enforcer.engine import ContainerView, Entry, views_of
from enforcer.policy import Policy, make_policy
from enforcer.state import StateError, StateStore
from enforcer.topology import Topology
from enforcer.views import cpu_cells, placements_report
from resource_contract.config import PolicyConfig


def status(state_dir: str, output: str = "table") -> int:
    store = StateStore(state_dir)
    try:
        saved = store.load(move_aside=False)  # a read-only look: never moves the file
    except OSError as exc:
        print(f"cannot read {store.path}: {exc}", file=sys.stderr)
        return 1
    except StateError as exc:
        print(f"cannot use the state: {exc}", file=sys.stderr)
        return 1
    if saved is None:
        print(
            f"no state in {store.path}: the enforcer has not run with this --state-dir",
            file=sys.stderr,
        )
        return 1
    topology = Topology.from_dict(saved["topology"])
    policy = make_policy(topology, PolicyConfig.model_validate(saved.get("policyConfig", {})))
    policy.restore(saved.get("policy", {}))
    entries = [Entry.from_dict(e) for e in saved.get("containers", [])]
    rows = views_of(policy, {e.key: e for e in entries})
    if output == "json":
        print(json.dumps(status_document(topology, policy, rows), indent=2))
        return 0
    print(f"policy {policy.name}; {topology.describe()}")
    print(
        f"available {policy.available}; reserved {policy.reserved or 'none'}; "
        f"exclusive {policy.taken or 'none'}"
    )
    print()
    print(placements_report(topology, policy, rows))
    return 0


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
        "exclusiveCPUs": str(policy.taken),
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
    }


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
        "phase": r.phase or None,
        "problem": r.problem,
    }
