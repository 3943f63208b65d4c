"""`plan`'s Dynamic Resource Allocation: what ResourceClaims would get on this machine.

The devices are those our driver would publish here (`enforcer.dra.devices`, in `dra.mode`,
from the CPUs the policy does not hold at that moment) and those of the other drivers'
ResourceSlices given in the file. Claims are allocated in file order, as the scheduler would:
a pod's claims when the pod comes (a template gives each pod its own claim `POD-CLAIM`; a named
claim is allocated once and shared by every pod that uses it), a claim or template that no pod
uses at its place in the file. Each allocated claim is then prepared and held by the node's own
code (`enforcer.dra.claims.prepare_claim`, `enforcer.engine.claimed`): its CPUs (in grouped mode
picked inside the allocated NUMA node), memory nodes and the classes of its configuration; held,
no other container gets them. A container that names a claim is admitted as the node admits it
(on the shared pool, `claimed.for_container`) and runs on its claims' CPUs (`pinning_of`): as on
the node, a container that names a request with CPUs of ours (or the whole claim) gets every CPU
of the claim; one that names only another driver's request is placed by the policy.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from enforcer.claims.allocate import Allocated, Allocator, Unsatisfiable
from enforcer.claims.model import (
    ClaimInputError,
    ClaimSpec,
    Device,
    DeviceClass,
    claim_spec,
    device_class,
    devices_of_slice,
)
from enforcer.commands.manifests import DRAObject, PlanInputError, Pod
from enforcer.dra.claims import ClaimError, ClassRules, PreparedClaim, prepare_claim
from enforcer.dra.devices import CPUDetails, allocatable_cpus, build_devices, slice_specs
from enforcer.engine import claimed
from enforcer.policy import Policy
from enforcer.topology import CPUSet, Topology
from resource_contract.config import Config
from resource_contract.dra_config import DRA_DRIVER

OUR_CLASS = DeviceClass(DRA_DRIVER, (f'device.driver == "{DRA_DRIVER}"',))
_NODE = "plan-node"  # the pool our devices are published in


@dataclass
class Claim:
    """One claim's outcome: its devices, the CPUs it holds, or why it got none."""

    namespace: str
    name: str
    source: str  # ResourceClaim, or ResourceClaimTemplate TEMPLATE
    uid: str = ""
    pods: list[str] = field(default_factory=list)
    results: list[Allocated] = field(default_factory=list)
    prepared: PreparedClaim | None = None
    error: str | None = None

    def ours(self, request: str | None) -> bool:
        """Whether the request (`req` also takes its subrequests; None: any) has our devices."""
        return any(
            a.device.driver == DRA_DRIVER
            and (request is None or a.request == request or a.request.startswith(f"{request}/"))
            for a in self.results
        )

    def row(self) -> dict[str, Any]:
        p = self.prepared
        return {
            "namespace": self.namespace,
            "claim": self.name,
            "source": self.source,
            "pods": self.pods,
            "cpus": str(p.cpus) if p is not None else None,
            "mems": str(p.mems) if p is not None else None,
            "rdtClass": p.classes.rdt if p is not None else None,
            "blockioClass": p.classes.blockio if p is not None else None,
            "cpuClass": p.classes.cpu if p is not None else None,
            "devices": [_result(a) for a in self.results],
            "error": self.error,
        }


def _result(a: Allocated) -> dict[str, Any]:
    d = a.device
    row: dict[str, Any] = {
        "request": a.request,
        "driver": d.driver,
        "pool": d.pool,
        "device": d.name,
    }
    if a.consumed:
        row["consumed"] = {_unqualified(d.driver, k): str(v) for k, v in a.consumed.items()}
    return row


def _unqualified(driver: str, name: str) -> str:
    return name.removeprefix(f"{driver}/")


def class_rules(config: Config) -> ClassRules:
    """What the configuration allows a claim's parameters to ask for."""
    return ClassRules(
        configured={
            "rdt": frozenset(config.configured_classes("rdt")),
            "blockio": frozenset(config.configured_classes("blockio")),
            "cpu": frozenset(config.cpuClasses),
        },
        access={
            "rdt": {k: tuple(v) for k, v in config.classAccess.rdt.items()},
            "blockio": {k: tuple(v) for k, v in config.classAccess.blockio.items()},
            "cpu": {k: tuple(v) for k, v in config.classAccess.cpu.items()},
        },
    )


@dataclass(frozen=True)
class ContainerClaims:
    """A container's claims: the uids of those prepared (which it names to the node, as the
    CDI device of each), their names, and the first claim error."""

    uids: tuple[str, ...]
    claims: list[str]
    error: str | None


def _spec_of(obj: DRAObject) -> tuple[ClaimSpec, Mapping[str, Any]]:
    """The claim spec, parsed and as written (its `devices.config` rides on the allocation)."""
    spec = obj.body["spec"]
    path = "spec"
    if obj.kind == "ResourceClaimTemplate":
        spec, path = spec.get("spec"), "spec.spec"
    try:
        return claim_spec(spec, path), spec
    except ClaimInputError as exc:
        raise PlanInputError(f"{obj.where}: {exc}") from None


class ClaimPlanner:
    """The claims of one plan run over one policy; `rows` gives one object per claim."""

    def __init__(
        self,
        config: Config,
        topology: Topology,
        policy: Policy,
        objects: Iterable[DRAObject],
        details: Mapping[int, CPUDetails] | None = None,
    ) -> None:
        self.config, self.topology, self.policy = config, topology, policy
        self.details = details  # L2 groups and core types, as the driver reads them
        self.claims: dict[tuple[str, str], tuple[ClaimSpec, Mapping[str, Any]]] = {}
        self.templates: dict[tuple[str, str], tuple[ClaimSpec, Mapping[str, Any]]] = {}
        self.rules = class_rules(config)
        others: list[Device] = []
        classes = {OUR_CLASS.name: OUR_CLASS}
        for obj in objects:
            try:
                if obj.kind == "ResourceSlice":
                    devices = devices_of_slice(obj.body["spec"], "spec")
                    if any(d.driver == DRA_DRIVER for d in devices):
                        raise ClaimInputError(
                            f"spec.driver: {DRA_DRIVER}'s devices are what plan publishes "
                            "from --sysfs-root and --config; give only other drivers' slices"
                        )
                    others.extend(devices)
                elif obj.kind == "DeviceClass":
                    classes[obj.name] = device_class(obj.body, "")
            except ClaimInputError as exc:
                raise PlanInputError(f"{obj.where}: {str(exc).lstrip('.')}") from None
            if obj.kind in ("ResourceClaim", "ResourceClaimTemplate"):
                table = self.claims if obj.kind == "ResourceClaim" else self.templates
                key = (obj.namespace or "default", obj.name)
                if key in table:
                    raise PlanInputError(
                        f"{obj.where}: {obj.kind} {key[0]}/{key[1]} is given twice"
                    )
                table[key] = _spec_of(obj)
        self.others = others
        self.allocator = Allocator([], classes)
        self.done: dict[tuple[str, str], Claim] = {}
        self.order: list[Claim] = []
        self.used_by_pods: set[tuple[str, str, str]] = set()  # (kind, namespace, name)

    # --- the devices of this node now --------------------------------------------------------

    def _our_devices(self) -> list[Device]:
        if not self.config.dra.enabled:
            return []
        held = self.policy.taken - self._claimed()  # the policy's own exclusive CPUs
        offered = allocatable_cpus(self.policy.available, self.policy.reserved, held)
        devices = build_devices(
            self.topology,
            offered,
            self.config.dra.mode,
            self.details,
            cpu_classes=self.policy.cpu_classes(),
        )
        found: list[Device] = []
        for spec in slice_specs(_NODE, devices, 1):
            found.extend(devices_of_slice(spec, "spec"))
        return found

    # --- allocation --------------------------------------------------------------------------

    def _claimed(self) -> CPUSet:
        return CPUSet().union(*(a.exclusive for a in claimed.claims(self.policy).values()))

    def _allocate(
        self, namespace: str, name: str, source: str, spec: tuple[ClaimSpec, Mapping[str, Any]]
    ) -> Claim:
        uid = str(uuid.uuid5(uuid.NAMESPACE_URL, f"resourceclaim/{namespace}/{name}"))
        claim = Claim(namespace, name, source, uid)
        self.order.append(claim)
        self.allocator.devices = self._our_devices() + self.others
        try:
            claim.results = self.allocator.allocate(spec[0])
        except (Unsatisfiable, ClaimInputError) as exc:
            claim.error = f"claim {namespace}/{name}: {exc}{self._hint(spec[0])}"
            return claim
        if not any(a.device.driver == DRA_DRIVER for a in claim.results):
            return claim  # other drivers' devices only: nothing for the enforcer to hold
        try:
            claim.prepared = prepare_claim(
                self._as_allocated(claim, spec[1]),
                node_name=_NODE,
                topology=self.topology,
                offered=self.policy.available - self.policy.reserved,
                holders=claimed.holders(self.policy),
                rules=self.rules,
            )
            classes = claim.prepared.classes
            holder = claimed.claim_request(
                uid,
                namespace,
                name,
                rdt_class=classes.rdt,
                blockio_class=classes.blockio,
                cpu_class=classes.cpu,
            )
            claimed.hold(self.policy, holder, claim.prepared.cpus)
        except (ClaimError, ValueError) as exc:
            claim.prepared, claim.error = None, str(exc)
        return claim

    def _as_allocated(self, claim: Claim, spec: Mapping[str, Any]) -> dict[str, Any]:
        """The claim as the API server returns it once the scheduler allocated it."""
        results = []
        for a in claim.results:
            result: dict[str, Any] = {"request": a.request, "driver": a.device.driver}
            result |= {"pool": a.device.pool, "device": a.device.name}
            if a.consumed:
                consumed = {_unqualified(a.device.driver, k): str(v) for k, v in a.consumed.items()}
                result["consumedCapacity"] = consumed
            results.append(result)
        config = (spec.get("devices") or {}).get("config") or []
        from_claim = [{**c, "source": "FromClaim"} for c in config if isinstance(c, Mapping)]
        return {
            "metadata": {"uid": claim.uid, "namespace": claim.namespace, "name": claim.name},
            "spec": spec,
            "status": {"allocation": {"devices": {"results": results, "config": from_claim}}},
        }

    def _hint(self, spec: ClaimSpec) -> str:
        ours = any(c.device_class == DRA_DRIVER for r in spec.requests for c in r.choices)
        if ours and not self.config.dra.enabled:
            return " (dra.enabled is false in the configuration: this node publishes no CPUs)"
        return ""

    def claim(self, namespace: str, name: str) -> Claim | None:
        """A named ResourceClaim, allocated the first time it is used; None when not given."""
        key = (namespace, name)
        if key in self.done:
            return self.done[key]
        if key not in self.claims:
            return None
        claim = self._allocate(namespace, name, "ResourceClaim", self.claims[key])
        self.done[key] = claim
        return claim

    def standalone(self, obj: DRAObject) -> None:
        """A claim or template at its place in the file, unless a pod uses it."""
        ns = obj.namespace or "default"
        if obj.kind == "ResourceClaim" and ("c", ns, obj.name) not in self.used_by_pods:
            self.claim(ns, obj.name)
        if obj.kind == "ResourceClaimTemplate" and ("t", ns, obj.name) not in self.used_by_pods:
            spec = self.templates[(ns, obj.name)]
            self._allocate(ns, obj.name, f"ResourceClaimTemplate {obj.name}", spec)

    def note_uses(self, pods: Iterable[Pod]) -> None:
        """Which claims and templates pods use (those are allocated with their pods)."""
        for pod in pods:
            ns = pod["metadata"].get("namespace", "default")
            for ref in _pod_claims(pod):
                kind = "c" if ref.get("resourceClaimName") else "t"
                name = ref.get("resourceClaimName") or ref.get("resourceClaimTemplateName")
                self.used_by_pods.add((kind, ns, str(name)))

    # --- pods --------------------------------------------------------------------------------

    def for_pod(self, pod: Pod) -> dict[str, ContainerClaims]:
        """Allocate the pod's claims; container name -> what its claims give it."""
        meta = pod["metadata"]
        ns, pod_name = meta.get("namespace", "default"), meta["name"]
        where = f"pod {ns}/{pod_name}"
        by_name: dict[str, Claim | str] = {}
        for i, ref in enumerate(_pod_claims(pod)):
            at = f"{where}: spec.resourceClaims[{i}]"
            name = ref.get("name")
            if not isinstance(name, str) or not name or name in by_name:
                raise PlanInputError(f"{at}.name: a unique name is needed, got {name!r}")
            claim_name, template = (
                ref.get("resourceClaimName"),
                ref.get("resourceClaimTemplateName"),
            )
            if (claim_name is None) == (template is None):
                raise PlanInputError(
                    f"{at}: exactly one of resourceClaimName and resourceClaimTemplateName"
                )
            found: Claim | None
            if claim_name is not None:
                found = self.claim(ns, str(claim_name))
                missing = f"ResourceClaim {ns}/{claim_name} is not in the file"
            else:
                entry = self.templates.get((ns, str(template)))
                found = None
                if entry is not None:
                    found = self._allocate(
                        ns, f"{pod_name}-{name}", f"ResourceClaimTemplate {template}", entry
                    )
                missing = f"ResourceClaimTemplate {ns}/{template} is not in the file"
            if found is None:
                by_name[name] = f"{at}: {missing} (the pod would stay pending)"
            else:
                found.pods.append(pod_name)
                by_name[name] = found
        return {
            c["name"]: self._container(where, c, by_name)
            for field_name in ("initContainers", "containers")
            for c in pod["spec"].get(field_name) or []
            if (c.get("resources") or {}).get("claims")
        }

    def _container(
        self, where: str, container: Mapping[str, Any], by_name: Mapping[str, Claim | str]
    ) -> ContainerClaims:
        refs = container["resources"]["claims"]
        at = f"{where}: container {container['name']}: resources.claims"
        if not isinstance(refs, list):
            raise PlanInputError(f"{at}: expected a list")
        uids: list[str] = []
        names: list[str] = []
        error: str | None = None
        for i, ref in enumerate(refs):
            name = ref.get("name") if isinstance(ref, dict) else None
            if not isinstance(name, str) or name not in by_name:
                raise PlanInputError(
                    f"{at}[{i}].name: {name!r} is not one of the pod's spec.resourceClaims"
                )
            request = ref.get("request")
            if request is not None and not isinstance(request, str):
                raise PlanInputError(f"{at}[{i}].request: expected a string")
            claim = by_name[name]
            if isinstance(claim, str):
                error = error or claim
                continue
            names.append(claim.name)
            error = error or claim.error
            # kubelet hands the container the CDI ids of the requests it names: our mark comes
            # with any request that has a CPU of ours, and stands for the whole claim.
            if claim.prepared is not None and claim.uid not in uids and claim.ours(request):
                uids.append(claim.uid)
        return ContainerClaims(tuple(uids), names, error)

    def rows(self) -> list[dict[str, Any]]:
        return [c.row() for c in self.order]


def _pod_claims(pod: Pod) -> list[Mapping[str, Any]]:
    refs = pod["spec"].get("resourceClaims") or []
    if not isinstance(refs, list) or not all(isinstance(r, dict) for r in refs):
        meta = pod["metadata"]
        raise PlanInputError(
            f"pod {meta.get('namespace', 'default')}/{meta['name']}: spec.resourceClaims: "
            "expected a list of objects"
        )
    return refs
