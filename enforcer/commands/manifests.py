"""The pods a manifest file stands for: Pods, and the pod templates of workloads, replicas honoured.

Reads multi-document YAML or a `kind: List`. A Deployment, StatefulSet or ReplicaSet stands for
`spec.replicas` pods (default 1), a Job for `spec.parallelism` pods (default 1; no more than
`spec.completions` when that is smaller), a CronJob for one run of its job template, a DaemonSet
for one pod (the one this node would run). The pods of a workload `W` are named `W-0`, `W-1`, ...
in the workload's namespace. Beside them the Dynamic Resource Allocation objects plan simulates
are kept, in file order, as DRAObjects: ResourceClaims, ResourceClaimTemplates, ResourceSlices (of
other drivers, for alignment) and DeviceClasses. Anything else is refused with a message naming
the file, the document and the field, as is a file beyond MANIFEST_LIMITS and more than MAX_PODS
pods.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from resource_contract.bounded import BoundError, Limits, load_yaml_all
from resource_contract.quantities import parse_quantity
from resource_files.reads import read_text_file

Pod = Mapping[str, Any]

# kind -> path of its pod template under the object, and the field that counts its pods
# (None: one pod).
_WORKLOADS: dict[str, tuple[tuple[str, ...], tuple[str, ...] | None]] = {
    "Deployment": (("spec", "template"), ("spec", "replicas")),
    "StatefulSet": (("spec", "template"), ("spec", "replicas")),
    "ReplicaSet": (("spec", "template"), ("spec", "replicas")),
    "DaemonSet": (("spec", "template"), None),
    "Job": (("spec", "template"), ("spec", "parallelism")),
    "CronJob": (("spec", "jobTemplate", "spec", "template"), ("spec", "jobTemplate", "spec")),
}
DRA_KINDS = ("ResourceClaim", "ResourceClaimTemplate", "ResourceSlice", "DeviceClass")
KINDS = ("Pod", *_WORKLOADS, *DRA_KINDS)
# Claims, templates, slices and classes of one run: a node's claims are bounded by its pods.
MAX_DRA_OBJECTS = 10_000
# Pods of one run, replicas counted before any is made: a node holds 110 by default and a few
# hundred at most, so this is room for any node many times over, and a `replicas: 1000000000`
# is refused at once instead of eating all memory.
MAX_PODS = 10_000
# A pods file: Kubernetes stores an object of at most 1.5 MiB; 8 MiB holds many of them. A pod
# nests some 16 levels (a CronJob's pod template's affinity terms, in a List): 64 is room for
# any; the values it stands for (aliases expanded) are bounded as a file of 1 Mi values.
MANIFEST_LIMITS = Limits(max_bytes=8 << 20, max_depth=64, max_nodes=1 << 20)


class PlanInputError(ValueError):
    """A manifest file `plan` cannot use; the message names the file, document and field."""


@dataclass(frozen=True)
class DRAObject:
    """A resource.k8s.io object of the file; `where` names its document for messages."""

    kind: str
    name: str
    namespace: str | None  # None for the cluster-scoped ResourceSlice and DeviceClass
    body: Mapping[str, Any]
    where: str


@dataclass
class Manifests:
    """Every object of a file in file order: pods (workloads expanded) and DRA objects."""

    entries: list[Pod | DRAObject] = dataclasses.field(default_factory=list)

    @property
    def pods(self) -> list[Pod]:
        return [e for e in self.entries if not isinstance(e, DRAObject)]

    @property
    def dra(self) -> list[DRAObject]:
        return [e for e in self.entries if isinstance(e, DRAObject)]


def load_pods(path: str) -> list[Pod]:
    """The pods of every document, in file order (DRA objects left out)."""
    return load_manifests(path).pods


def load_manifests(path: str) -> Manifests:
    """The pods and DRA objects of every document, in file order."""
    try:
        text = read_text_file(path, MANIFEST_LIMITS)
    except BoundError as exc:
        raise PlanInputError(f"{path}: {exc}") from None
    except OSError as exc:
        raise PlanInputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        documents = [d for d in load_yaml_all(text, MANIFEST_LIMITS) if d is not None]
    except BoundError as exc:
        raise PlanInputError(f"{path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise PlanInputError(f"{path}: not valid YAML: {exc}") from None
    found = Manifests()
    pods = 0
    for index, doc in enumerate(documents):
        is_list = isinstance(doc, dict) and doc.get("kind") == "List"
        items = (doc.get("items") or []) if is_list else [doc]
        if not isinstance(items, list):
            raise PlanInputError(f"{path}: document {index}: items must be a list")
        for item_index, item in enumerate(items):
            where = f"{path}: document {index}" + (f" items[{item_index}]" if is_list else "")
            if isinstance(item, dict) and item.get("kind") in DRA_KINDS:
                if len(found.entries) - pods >= MAX_DRA_OBJECTS:
                    raise PlanInputError(f"{where}: more than {MAX_DRA_OBJECTS} DRA objects")
                found.entries.append(_dra_object(item, where))
                continue
            more = pods_of(item, where, room=MAX_PODS - pods)
            pods += len(more)
            found.entries.extend(more)
    return found


def _dra_object(item: Mapping[str, Any], where: str) -> DRAObject:
    kind = item["kind"]
    api = item.get("apiVersion")
    if api != "resource.k8s.io/v1":
        raise PlanInputError(
            f"{where}: apiVersion: {kind} is read as resource.k8s.io/v1, got {api!r}"
        )
    metadata = item.get("metadata")
    if not isinstance(metadata, dict) or not isinstance(metadata.get("name"), str):
        raise PlanInputError(f"{where}: metadata.name is missing")
    namespace = None
    if kind in ("ResourceClaim", "ResourceClaimTemplate"):
        namespace = metadata.get("namespace", "default")
        if not isinstance(namespace, str):
            raise PlanInputError(f"{where}: metadata.namespace must be a string")
    if not isinstance(item.get("spec"), dict):
        raise PlanInputError(f"{where}: spec must be a mapping")
    return DRAObject(kind, metadata["name"], namespace, item, where)


def pods_of(item: Any, where: str, room: int = MAX_PODS) -> list[Pod]:
    """The pods one object stands for; PlanInputError naming `where` and the field. More than
    `room` pods are refused before any is made."""
    kind = item.get("kind") if isinstance(item, dict) else type(item).__name__
    if kind not in KINDS or kind in DRA_KINDS:
        raise PlanInputError(f"{where}: kind: expected one of {', '.join(KINDS)}, got {kind!r}")
    metadata = item.get("metadata")
    if not isinstance(metadata, dict) or not isinstance(metadata.get("name"), str):
        raise PlanInputError(f"{where}: metadata.name is missing")
    namespace = metadata.get("namespace", "default")
    if not isinstance(namespace, str):
        raise PlanInputError(f"{where}: metadata.namespace must be a string")
    if kind == "Pod":
        _check_spec(item.get("spec"), where, "spec")
        if room < 1:
            raise PlanInputError(f"{where}: {_too_many(1, room)}")
        return [item]
    template_path, count_path = _WORKLOADS[kind]
    template = _at(item, template_path)
    prefix = ".".join(template_path)
    if not isinstance(template, dict):
        raise PlanInputError(f"{where}: {prefix} is missing")
    _check_spec(template.get("spec"), where, f"{prefix}.spec")
    template_meta = template.get("metadata") or {}
    if not isinstance(template_meta, dict):
        raise PlanInputError(f"{where}: {prefix}.metadata must be a mapping")
    count = _count(item, kind, count_path, where)
    if count > room:
        field = "spec.parallelism" if kind == "Job" else ".".join(count_path or ())
        raise PlanInputError(f"{where}: {field}: {_too_many(count, room)}")
    return [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                **{k: v for k, v in template_meta.items() if k in ("labels", "annotations")},
                "name": f"{metadata['name']}-{i}",
                "namespace": namespace,
            },
            "spec": template["spec"],
        }
        for i in range(count)
    ]


def _too_many(count: int, room: int) -> str:
    return (
        f"{count} pods would make more than {MAX_PODS}, the most plan places in one run "
        f"({MAX_PODS - room} before this one); a node holds far fewer (kubelet's maxPods: 110 "
        "by default)"
    )


def _at(item: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = item
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _count(item: Mapping[str, Any], kind: str, path: tuple[str, ...] | None, where: str) -> int:
    if path is None:  # a DaemonSet: one pod on this node
        return 1
    if kind == "CronJob":  # one run of its Job
        job = _at(item, path) or {}
        return _job_pods(job, where, ".".join(path))
    if kind == "Job":
        return _job_pods(item.get("spec") or {}, where, "spec")
    return _non_negative(_at(item, path), where, ".".join(path))


def _job_pods(job_spec: Any, where: str, prefix: str) -> int:
    """A Job runs `parallelism` pods at once, never more than its `completions`."""
    if not isinstance(job_spec, dict):
        raise PlanInputError(f"{where}: {prefix} must be a mapping")
    parallel = _non_negative(job_spec.get("parallelism"), where, f"{prefix}.parallelism")
    if job_spec.get("completions") is None:
        return parallel
    completions = _non_negative(job_spec["completions"], where, f"{prefix}.completions")
    return min(parallel, completions)


def _non_negative(value: Any, where: str, field: str) -> int:
    if value is None:
        return 1
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise PlanInputError(
            f"{where}: {field}: expected a whole number of 0 or more, got {value!r}"
        )
    return value


def _check_spec(spec: Any, where: str, prefix: str) -> None:
    if not isinstance(spec, dict) or not isinstance(spec.get("containers"), list):
        raise PlanInputError(f"{where}: {prefix}.containers must be a list")
    for field in ("initContainers", "containers"):
        containers = spec.get(field) or []
        if not isinstance(containers, list):
            raise PlanInputError(f"{where}: {prefix}.{field} must be a list")
        for i, c in enumerate(containers):
            if not isinstance(c, dict) or not isinstance(c.get("name"), str):
                raise PlanInputError(f"{where}: {prefix}.{field}[{i}].name is missing")
            _check_resources(c.get("resources"), where, f"{prefix}.{field}[{i}].resources")


def _check_resources(resources: Any, where: str, prefix: str) -> None:
    """Quantities the API server would refuse are refused here too (the QoS class, which every
    row shows, cannot be worked out without them)."""
    if resources is None:
        return
    if not isinstance(resources, dict):
        raise PlanInputError(f"{where}: {prefix} must be a mapping")
    for kind in ("requests", "limits"):
        quantities = resources.get(kind) or {}
        if not isinstance(quantities, dict):
            raise PlanInputError(f"{where}: {prefix}.{kind} must be a mapping")
        for name, value in quantities.items():
            try:
                quantity = parse_quantity(value)
            except ValueError as exc:
                raise PlanInputError(f"{where}: {prefix}.{kind}.{name}: {exc}") from None
            if quantity < 0:
                raise PlanInputError(
                    f"{where}: {prefix}.{kind}.{name}: {value!r} is negative (the API server "
                    "refuses a negative request or limit)"
                )
