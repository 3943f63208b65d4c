"""`resource-enforcer plan`: what the webhook and the relay would do with these pods.

Each pod goes the way it would in a cluster: the webhook's annotation is computed (by the
contract's code), what kubelet would ask the runtime for is derived from the manifest, and the
enforcer's decoder and policy place every container, in file order. Nothing is started.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from enforcer.commands.manifests import DRAObject, PlanInputError, Pod, load_manifests
from enforcer.commands.plan_claims import ClaimPlanner, ContainerClaims
from enforcer.commands.plan_devices import load_devices
from enforcer.configuration import load_config
from enforcer.decode import (
    ContainerCreate,
    ContainerRequest,
    DecodeError,
    Machine,
    decode_container,
)
from enforcer.decode.kubelet import cgroup_parent_for, resources_for
from enforcer.dra.cpu_details import read_cpu_details
from enforcer.dra.devices import CPUDetails
from enforcer.engine import claimed, views_of
from enforcer.engine.model import DeviceFacts
from enforcer.engine.shared import class_settings
from enforcer.policy import Placement, PlacementError, Policy, make_policy
from enforcer.refusal import Reason
from enforcer.sysfs import read_topology
from enforcer.topology import CPUSet, Topology, TopologyError
from enforcer.views import placements_report
from resource_contract.config import Config, ConfigError
from resource_contract.keys import RESOURCES_KEY
from resource_contract.pod_annotation import Denial, build_annotation
from resource_contract.pod_annotation import Policy as AdmissionPolicy
from resource_contract.qos import qos_class


@dataclass
class _Planned:
    namespace: str
    pod: str
    container: str
    qos: str  # the pod's, from its spec: known even when the container is refused
    request: ContainerRequest | None = None
    rdt_class: str | None = None
    blockio_class: str | None = None
    error: str | None = None
    # The pool that came closest, for a container the policy had no room for.
    nearest_pool: str | None = None
    # Set for init containers that ran to completion: where they ran.
    finished: Placement | None = None
    # Set for a container that uses ResourceClaims: which, and the (cpus, mems) they pin.
    claims: ContainerClaims | None = None
    pinned: tuple[CPUSet, CPUSet] | None = None


def _admitted_manifest(pod: Pod, config: Config) -> dict[str, Any]:
    """The pod as the API server stores it after our webhook mutated it."""
    manifest = json.loads(json.dumps(pod))
    metadata = manifest["metadata"]
    namespace = metadata.setdefault("namespace", "default")
    try:
        value = build_annotation(
            manifest, namespace=namespace, policy=AdmissionPolicy.from_config(config)
        )
    except Denial as exc:
        reason = Reason.FORBIDDEN if exc.code == 403 else Reason.BAD_REQUEST
        raise DecodeError(reason, f"denied at admission: {exc.message}") from None
    metadata.setdefault("annotations", {})[RESOURCES_KEY] = value
    return manifest


def _place_pod(
    pod: Pod,
    config: Config,
    policy: Policy,
    claims: ClaimPlanner | None = None,
    devices: Mapping[str, DeviceFacts] | None = None,
) -> list[_Planned]:
    meta = pod["metadata"]
    namespace = meta.get("namespace", "default")
    uid = meta.get("uid") or str(uuid.uuid5(uuid.NAMESPACE_URL, f"{namespace}/{meta['name']}"))
    spec = pod["spec"]
    containers = [(c, True) for c in spec.get("initContainers") or []]
    containers += [(c, False) for c in spec["containers"]]
    qos = qos_class(spec)
    planned = [_Planned(namespace, meta["name"], c["name"], qos) for c, _ in containers]
    claims_of = claims.for_pod(pod) if claims is not None else {}
    try:
        manifest = _admitted_manifest(pod, config)
    except DecodeError as exc:
        for p in planned:
            p.error = str(exc)
        return planned
    annotations = dict(manifest["metadata"].get("annotations") or {})
    cgroup_parent = cgroup_parent_for(qos, uid)
    machine = Machine.of(policy.topology)
    for (container, init), p in zip(containers, planned, strict=True):
        create = ContainerCreate(
            pod_uid=uid,
            pod_name=meta["name"],
            namespace=namespace,
            container=container["name"],
            annotations=annotations,
            cgroup_parent=cgroup_parent,
            resources=resources_for(container, spec),
            labels=dict(meta.get("labels") or {}),
            # The claims it names, as kubelet hands them to the runtime (one CDI device each).
            dra_claims=got.uids if (got := claims_of.get(container["name"])) else (),
        )
        if got is not None:
            p.claims = got
            if got.error:  # kubelet does not start a pod whose claims are not allocated
                p.error = got.error
                continue
        try:
            request = decode_container(create, classes=class_settings(config), machine=machine)
            # As the engine does: on the shared pool, the classes of its claims, pinned to them.
            request = claimed.for_container(policy, create, request)
        except DecodeError as exc:
            p.error = str(exc)
            continue
        p.rdt_class, p.blockio_class = request.rdt_class, request.blockio_class
        facts = (devices or {}).get(f"{namespace}/{meta['name']}/{container['name']}")
        if facts is not None and config.policy.preferCloseToDevices:
            # As the engine does with what kubelet's pod-resources API reports.
            request = replace(request, devices=facts.devices, device_nodes=facts.nodes)
        try:
            policy.admit(request)
        except PlacementError as exc:
            p.error, p.nearest_pool = str(exc), exc.nearest_pool
            continue
        p.request = request
        p.pinned = claimed.pinning_of(policy, policy.topology, request)
        # An init container runs to completion before the next container starts: it is shown
        # where it ran, and its CPUs are free again for the rest of the pod. Sidecars
        # (restartPolicy Always) keep running beside the app containers.
        if init and container.get("restartPolicy") != "Always":
            p.finished = policy.placement(p.request.key)
            policy.release(p.request.key)
    return planned


def plan(
    config: Config,
    topology: Topology,
    pods: Iterable[Pod | DRAObject],
    claim_rows: list[dict] | None = None,
    cpu_details: Mapping[int, CPUDetails] | None = None,
    devices: Mapping[str, DeviceFacts] | None = None,
) -> tuple[Policy, list[dict]]:
    """The policy after every pod was admitted in order, and one row per container. DRA
    objects among the pods are simulated in order (plan_claims); one row per claim is
    appended to `claim_rows` when it is given. `devices`: namespace/pod/container -> the
    devices kubelet would report for it (plan_devices)."""
    policy = make_policy(topology, config.policy)
    entries = list(pods)
    objects = [e for e in entries if isinstance(e, DRAObject)]
    claims = ClaimPlanner(config, topology, policy, objects, cpu_details)
    claims.note_uses(e for e in entries if not isinstance(e, DRAObject))
    planned: list[_Planned] = []
    for entry in entries:
        if isinstance(entry, DRAObject):
            claims.standalone(entry)
        else:
            planned.extend(_place_pod(entry, config, policy, claims, devices))
    if claim_rows is not None:
        claim_rows.extend(claims.rows())
    all_mems = CPUSet(n.id for n in topology.nodes.values() if n.memory_bytes or n.cpus)
    rows = []
    cpu_classes = policy.cpu_classes()
    for p in planned:
        placement = p.finished
        if placement is None and p.request is not None:
            placement = policy.placement(p.request.key)
        row = _row(p, placement, topology.online, all_mems, policy.name == "balloons", cpu_classes)
        if p.request is not None and config.policy.preferCloseToDevices:
            row["devices"] = policy.device_note(p.request.key)
        rows.append(row)
    return policy, rows


def _row(
    p: _Planned,
    placement: Placement | None,
    online: CPUSet,
    all_mems: CPUSet,
    balloons: bool = False,
    cpu_classes: dict[int, str] | None = None,
) -> dict:
    row: dict[str, Any] = {
        "namespace": p.namespace,
        "pod": p.pod,
        "container": p.container,
        "qos": p.qos,
        "cpus": None,
        "mems": None,
        "exclusiveCPUs": None,
        "sharedCPUs": None,
        # Unplaced: the pool that came closest, where the policy compares pools.
        "pool": p.nearest_pool,
        "rdtClass": p.rdt_class,
        "blockioClass": p.blockio_class,
        "balloon": None,  # TYPE[N] under the balloons policy
        "cpuClass": None,
        "error": p.error,
    }
    if p.claims is not None:
        row["claims"] = p.claims.claims
    if p.pinned is not None:  # its claims' CPUs, held for them: nobody else's
        row.update(
            cpus=str(p.pinned[0]),
            mems=str(p.pinned[1]),
            exclusiveCPUs=str(p.pinned[0]),
            sharedCPUs="",
            pool="claim",
        )
        return row
    if placement is None or p.request is None:
        return row
    # A placement that leaves a value alone means the container inherits the node's.
    cpus = placement.cpus if placement.cpus is not None else online
    row.update(
        cpus=str(cpus),
        mems=str(placement.mems if placement.mems is not None else all_mems),
        exclusiveCPUs=str(placement.exclusive),
        sharedCPUs=str(cpus - placement.exclusive),
        pool=placement.pool,
    )
    if balloons and placement.kind in ("balloon", "reserved"):
        row["balloon"] = placement.pool  # TYPE[N]
    # The class of its own CPUs: its exclusive ones, or its balloon's (never the shared pool's).
    own = placement.exclusive if placement.exclusive else cpus if row["balloon"] else CPUSet()
    row["cpuClass"] = _one_class(own, cpu_classes or {})
    return row


def _one_class(cpus: CPUSet, cpu_classes: dict[int, str]) -> str | None:
    """The CPU class all of `cpus` are in, or None when they are in none (or not all in one)."""
    names = {cpu_classes.get(c) for c in cpus}
    return names.pop() if len(names) == 1 else None


def plan_command(
    config_path: str, sysfs_root: str, pods_path: str, fmt: str, devices_path: str | None = None
) -> int:
    try:
        config = load_config(config_path)
        topology = read_topology(sysfs_root)
        manifests = load_manifests(pods_path)
        reported = load_devices(devices_path) if devices_path else None
        claim_rows: list[dict] = []
        details = read_cpu_details(topology, sysfs_root) if manifests.dra else None
        policy, rows = plan(config, topology, manifests.entries, claim_rows, details, reported)
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"{config_path}: {problem}", file=sys.stderr)
        return 1
    except (TopologyError, PlanInputError) as exc:
        print(str(exc), file=sys.stderr)
        return 1
    # 2 when some container or claim could not be placed: a CI job can gate a rollout on it.
    code = 2 if any(r["error"] for r in rows + claim_rows) else 0
    if fmt == "json":
        print(json.dumps(rows + claim_rows, indent=2))
        return code
    print(placements_report(topology, policy, views_of(policy, {})))
    for key, admitted in policy.admitted.items():
        req = admitted.request
        if ignored := policy.cpu_class_ignored(key):
            print(f"NOTE {req.namespace}/{req.pod_name}/{req.container}: {ignored}")
        if note := policy.device_note(key):
            print(f"DEVICES {req.namespace}/{req.pod_name}/{req.container}: {note}")
    for r in rows:
        if r["error"]:
            print(f"NOT PLACED {r['namespace']}/{r['pod']}/{r['container']}: {r['error']}")
    for c in claim_rows:
        if c["error"]:
            print(f"NOT ALLOCATED {c['error']}")
            continue
        by_request: dict[str, list[str]] = {}
        for d in c["devices"]:
            by_request.setdefault(d["request"], []).append(f"{d['driver']}/{d['device']}")
        devices = "; ".join(f"{r}: {', '.join(names)}" for r, names in by_request.items())
        print(f"CLAIM {c['namespace']}/{c['claim']}: cpus {c['cpus'] or 'none'}; {devices}")
    return code
