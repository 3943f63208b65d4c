"""`plan`'s Dynamic Resource Allocation: what ResourceClaims would get on this machine.

The devices are those our driver would publish here (`enforcer.dra.devices`, in `dra.mode`,
from the CPUs the policy does not hold at that moment) and those of the other drivers'
ResourceSlices given in the file. Claims are allocated in file order, as the scheduler would:
a pod's claims when the pod comes (a template gives each pod its own claim `POD-CLAIM`; a named
claim is allocated once and shared by every pod that uses it), a claim or template that no pod
uses at its place in the file. The CPUs a claim gets are held in the policy under the claim, so
no other container gets them; in grouped mode they are picked inside the allocated NUMA node
by the CPU allocator. A container that uses a claim with our CPUs runs on exactly those CPUs
and their memory nodes.
"""

from __future__ import annotations

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
from enforcer.cpuallocator import NotEnoughCPUs, allocate_cpus
from enforcer.decode import ContainerRequest
from enforcer.dra.devices import (
    allocatable_cpus,
    build_devices,
    cpu_of_device,
    node_of_device,
    slice_specs,
)
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
    pods: list[str] = field(default_factory=list)
    results: list[Allocated] = field(default_factory=list)
    cpus: list[CPUSet] = field(default_factory=list)  # our CPUs of each result
    error: str | None = None

    def cpus_of(self, request: str | None) -> CPUSet:
        """Our CPUs of one request (`req` also takes its subrequests), or of all of them."""
        found = CPUSet()
        for a, cpus in zip(self.results, self.cpus, strict=True):
            if request is None or a.request == request or a.request.startswith(f"{request}/"):
                found |= cpus
        return found

    def row(self, topology: Topology) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "claim": self.name,
            "source": self.source,
            "pods": self.pods,
            "cpus": str(self.cpus_of(None)) if self.results else None,
            "devices": [
                _result(a, cpus, topology) for a, cpus in zip(self.results, self.cpus, strict=True)
            ],
            "error": self.error,
        }


def _result(a: Allocated, cpus: CPUSet, topology: Topology) -> dict[str, Any]:
    d = a.device
    row: dict[str, Any] = {
        "request": a.request,
        "driver": d.driver,
        "pool": d.pool,
        "device": d.name,
    }
    if a.consumed:
        row["consumed"] = {k: str(v) for k, v in a.consumed.items()}
    if d.driver == DRA_DRIVER:
        row["cpus"] = str(cpus)
        row["numaNodes"] = str(CPUSet(topology.cpus[c].node for c in cpus))
    return row


@dataclass(frozen=True)
class ContainerClaims:
    """What a container's claims give it: our CPUs (empty: the policy places it) and their
    memory nodes, the claims' names, and the first claim error."""

    cpus: CPUSet
    mems: CPUSet
    claims: list[str]
    error: str | None


def _spec_of(obj: DRAObject) -> ClaimSpec:
    spec = obj.body["spec"]
    path = "spec"
    if obj.kind == "ResourceClaimTemplate":
        spec, path = spec.get("spec"), "spec.spec"
    try:
        return claim_spec(spec, path)
    except ClaimInputError as exc:
        raise PlanInputError(f"{obj.where}: {exc}") from None


class ClaimPlanner:
    """The claims of one plan run over one policy; `rows` gives one object per claim."""

    def __init__(
        self, config: Config, topology: Topology, policy: Policy, objects: Iterable[DRAObject]
    ) -> None:
        self.config, self.topology, self.policy = config, topology, policy
        self.claims: dict[tuple[str, str], tuple[DRAObject, ClaimSpec]] = {}
        self.templates: dict[tuple[str, str], tuple[DRAObject, ClaimSpec]] = {}
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
                table[key] = (obj, _spec_of(obj))
        self.others = others
        self.allocator = Allocator([], classes)
        self.done: dict[tuple[str, str], Claim] = {}
        self.order: list[Claim] = []
        self.claimed = CPUSet()
        self.used_by_pods: set[tuple[str, str, str]] = set()  # (kind, namespace, name)

    # --- the devices of this node now --------------------------------------------------------

    def _our_devices(self) -> list[Device]:
        if not self.config.dra.enabled:
            return []
        held = self.policy.taken - self.claimed  # the policy's own exclusive CPUs
        offered = allocatable_cpus(self.policy.available, self.policy.reserved, held)
        devices = build_devices(
            self.topology, offered, self.config.dra.mode, cpu_classes=self.policy.cpu_classes()
        )
        found: list[Device] = []
        for spec in slice_specs(_NODE, devices, 1):
            found.extend(devices_of_slice(spec, "spec"))
        return found

    # --- allocation --------------------------------------------------------------------------

    def _allocate(self, namespace: str, name: str, source: str, spec: ClaimSpec) -> Claim:
        claim = Claim(namespace, name, source)
        self.order.append(claim)
        self.allocator.devices = self._our_devices() + self.others
        try:
            claim.results = self.allocator.allocate(spec)
        except (Unsatisfiable, ClaimInputError) as exc:
            claim.error = f"claim {namespace}/{name}: {exc}{self._hint(spec)}"
            return claim
        try:
            claim.cpus = self._cpus(claim.results)
        except NotEnoughCPUs as exc:  # grouped: the group's free CPUs were fewer than its capacity
            claim.error = f"claim {namespace}/{name}: no CPUs left in its NUMA node: {exc}"
            return claim
        cpus = claim.cpus_of(None)
        if cpus:
            holder = ContainerRequest(
                pod_uid=f"claim:{namespace}/{name}",
                pod_name=name,
                namespace=namespace,
                container="(claim)",
                qos="Guaranteed",
            )
            self.policy.hold(holder, cpus)
            self.claimed |= cpus
        return claim

    def _cpus(self, results: list[Allocated]) -> list[CPUSet]:
        """Our CPUs of each result: a CPU device's CPU; in a NUMA node device, as many CPUs as
        the result consumed, picked by the CPU allocator among the node's free CPUs."""
        found: list[CPUSet] = []
        picked = CPUSet()
        for a in results:
            cpus = CPUSet()
            if a.device.driver == DRA_DRIVER:
                cpu = cpu_of_device(a.device.name)
                if cpu is not None:
                    cpus = CPUSet([cpu])
                else:
                    node = node_of_device(a.device.name)
                    assert node is not None, a.device.name
                    count = int(sum(a.consumed.values()))
                    free = self.policy.available - self.policy.reserved - self.policy.taken
                    free = (free - picked) & self.topology.cpus_of_node(node)
                    cpus = allocate_cpus(self.topology, free, count)
            picked |= cpus
            found.append(cpus)
        return found

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
        claim = self._allocate(namespace, name, "ResourceClaim", self.claims[key][1])
        self.done[key] = claim
        return claim

    def standalone(self, obj: DRAObject) -> None:
        """A claim or template at its place in the file, unless a pod uses it."""
        ns = obj.namespace or "default"
        if obj.kind == "ResourceClaim" and ("c", ns, obj.name) not in self.used_by_pods:
            self.claim(ns, obj.name)
        if obj.kind == "ResourceClaimTemplate" and ("t", ns, obj.name) not in self.used_by_pods:
            spec = self.templates[(ns, obj.name)][1]
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
                        ns, f"{pod_name}-{name}", f"ResourceClaimTemplate {template}", entry[1]
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
        cpus, names, error = CPUSet(), [], None
        for i, ref in enumerate(refs):
            name = ref.get("name") if isinstance(ref, dict) else None
            if not isinstance(name, str) or name not in by_name:
                raise PlanInputError(
                    f"{at}[{i}].name: {name!r} is not one of the pod's spec.resourceClaims"
                )
            claim = by_name[name]
            if isinstance(claim, str):
                error = error or claim
                continue
            names.append(claim.name)
            error = error or claim.error
            request = ref.get("request")
            if request is not None and not isinstance(request, str):
                raise PlanInputError(f"{at}[{i}].request: expected a string")
            cpus |= claim.cpus_of(request)
        mems = CPUSet(self.topology.cpus[c].node for c in cpus)
        return ContainerClaims(cpus, mems, names, error)

    def rows(self) -> list[dict[str, Any]]:
        return [c.row(self.topology) for c in self.order]


def _pod_claims(pod: Pod) -> list[Mapping[str, Any]]:
    refs = pod["spec"].get("resourceClaims") or []
    if not isinstance(refs, list) or not all(isinstance(r, dict) for r in refs):
        meta = pod["metadata"]
        raise PlanInputError(
            f"pod {meta.get('namespace', 'default')}/{meta['name']}: spec.resourceClaims: "
            "expected a list of objects"
        )
    return refs
