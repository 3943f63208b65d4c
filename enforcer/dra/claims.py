"""Preparing a ResourceClaim of `cpu.resource-enforcer.dev` on this node: the claim's JSON (as
the API server returns it) and the node's state -> the CPUs and classes the claim's containers
get, or a ClaimError naming the offending field. Pure: no I/O, no transport types.

What a prepared claim holds:

- `individual` mode: exactly the allocated devices' CPUs (`cpu-N` -> CPU N).
- `grouped` mode: for each allocated `numa-N` device, the consumed capacity
  (`consumedCapacity["cpu"]`, 1 when absent) in whole CPUs, picked by the topology-aware
  allocator inside node N among the CPUs free at prepare time. Picked once: the pick is saved
  and kept across restarts.
- memory: the NUMA nodes of those CPUs (and their memory-only nodes).
- classes from the claim's opaque configuration for this driver (`parameters`, see
  `ClaimClasses`): `rdtClass`, `blockioClass`, `cpuClass`, each checked against the
  configuration and `classAccess` for the claim's namespace, as the annotations are.

How claimed CPUs and the enforcer's own exclusive CPUs never overlap (for docs/dra.md):

1. The ResourceSlices offer only CPUs that are neither reserved nor held exclusively by the
   enforcer's policy when they are published, and they are published again whenever that set
   changes; the scheduler therefore allocates only CPUs that were free.
2. A prepare whose CPUs another holder has taken since (a container's exclusive CPUs, or another
   claim) is refused with an error naming the holder; kubelet retries it, and the Pod stays
   pending with that message in its events, never runs on a shared CPU.
3. Once prepared, a claim's CPUs count as held exclusively: they leave every shared pool and no
   exclusive allocation of the policy can take them, until the claim is unprepared.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from enforcer.cpuallocator import NotEnoughCPUs, allocate_cpus
from enforcer.dra.devices import CAPACITY, cpu_of_device, node_of_device
from enforcer.topology import CPUSet, Topology
from resource_contract.classes import CLASS_NAME_PATTERN
from resource_contract.dra_config import DRA_DRIVER

PARAMETERS_API_VERSION = f"{DRA_DRIVER}/v1"
PARAMETERS_KIND = "CPUClaimParameters"
_CLASS_KEYS = {"rdtClass": "rdt", "blockioClass": "blockio", "cpuClass": "cpu"}
_NAME = re.compile(CLASS_NAME_PATTERN)
_SHOWN = 80  # characters of a bad value quoted in a message
MAX_RESULTS = 1024  # a claim's allocation results we read; more is refused as malformed


class ClaimError(ValueError):
    """A claim that cannot be prepared here; the message names the claim and the field."""


@dataclass(frozen=True)
class AllocatedDevice:
    """One allocation result of our driver: what kubelet gets back for it."""

    request: str
    pool: str
    device: str
    share_id: str | None = None


@dataclass(frozen=True)
class ClaimClasses:
    """The classes the claim's opaque configuration asks for (None: none asked)."""

    rdt: str | None = None
    blockio: str | None = None
    cpu: str | None = None


@dataclass(frozen=True)
class ClassRules:
    """What the configuration allows: configured class names per kind, and `classAccess`
    (kind -> class -> namespace globs; an unlisted class is open to every namespace)."""

    configured: Mapping[str, frozenset[str]] = field(default_factory=dict)
    access: Mapping[str, Mapping[str, tuple[str, ...]]] = field(default_factory=dict)


@dataclass(frozen=True)
class PreparedClaim:
    """A claim prepared on this node: plain data, saved with the state."""

    uid: str
    namespace: str
    name: str
    cpus: CPUSet
    mems: CPUSet
    devices: tuple[AllocatedDevice, ...]
    classes: ClaimClasses = ClaimClasses()

    @property
    def label(self) -> str:
        return f"claim {self.namespace}/{self.name}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "uid": self.uid,
            "namespace": self.namespace,
            "name": self.name,
            "cpus": str(self.cpus),
            "mems": str(self.mems),
            "devices": [vars(d) for d in self.devices],
            "classes": vars(self.classes),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PreparedClaim:
        """ValueError (naming the field) for a damaged saved claim."""
        try:
            return cls(
                uid=_text(data, "uid"),
                namespace=_text(data, "namespace"),
                name=_text(data, "name"),
                cpus=CPUSet.parse(_text(data, "cpus")),
                mems=CPUSet.parse(_text(data, "mems")),
                devices=tuple(AllocatedDevice(**d) for d in data.get("devices", [])),
                classes=ClaimClasses(**data.get("classes", {})),
            )
        except (TypeError, ValueError) as exc:
            raise ValueError(f"saved DRA claim is damaged: {exc}") from None


def _text(data: Mapping[str, Any], key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str):
        raise ValueError(f"{key} is {_shown(value)}, not a string")
    return value


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "..."


def _get(data: object, path: str) -> Any:
    """data[a][b]... for the dotted path, None when any step is missing or not an object."""
    for step in path.split("."):
        if not isinstance(data, Mapping):
            return None
        data = data.get(step)
    return data


def allocated_devices(claim: Mapping[str, Any], node_name: str) -> list[AllocatedDevice]:
    """Our driver's results in `status.allocation.devices.results`, checked to be this node's
    pool; ClaimError naming the field otherwise (or when the claim is not allocated)."""
    label = _label(claim)
    results = _get(claim, "status.allocation.devices.results")
    if not isinstance(results, list):
        raise ClaimError(f"{label}: status.allocation.devices.results is missing: not allocated")
    if len(results) > MAX_RESULTS:
        raise ClaimError(f"{label}: more than {MAX_RESULTS} allocation results")
    devices = []
    for i, result in enumerate(results):
        where = f"{label}: status.allocation.devices.results[{i}]"
        if not isinstance(result, Mapping):
            raise ClaimError(f"{where} is not an object")
        if result.get("driver") != DRA_DRIVER:
            continue  # another driver's device in the same claim (a GPU, a NIC)
        values = {k: result.get(k) for k in ("request", "pool", "device")}
        for key, value in values.items():
            if not isinstance(value, str) or not value:
                raise ClaimError(f"{where}.{key} is {_shown(value)}, not a name")
        if values["pool"] != node_name:
            raise ClaimError(
                f"{where}.pool is {_shown(values['pool'])}: not this node's pool ({node_name})"
            )
        share = result.get("shareID")
        devices.append(
            AllocatedDevice(
                str(values["request"]),
                str(values["pool"]),
                str(values["device"]),
                share if isinstance(share, str) and share else None,
            )
        )
    if not devices:
        raise ClaimError(f"{label}: no device of {DRA_DRIVER} is allocated to it")
    return devices


def _label(claim: Mapping[str, Any]) -> str:
    namespace = _get(claim, "metadata.namespace")
    name = _get(claim, "metadata.name")
    return f"claim {str(namespace)[:_SHOWN]}/{str(name)[:_SHOWN]}"


def claim_classes(claim: Mapping[str, Any], rules: ClassRules) -> ClaimClasses:
    """The classes of the claim's opaque configuration for our driver (both the class's and the
    claim's own, the later winning), checked and access-controlled for the claim's namespace."""
    label = _label(claim)
    namespace = str(_get(claim, "metadata.namespace") or "")
    configs = _get(claim, "status.allocation.devices.config") or []
    if not isinstance(configs, list):
        raise ClaimError(f"{label}: status.allocation.devices.config is not a list")
    asked: dict[str, str] = {}
    for i, config in enumerate(configs):
        opaque = _get(config, "opaque")
        if not isinstance(opaque, Mapping) or opaque.get("driver") != DRA_DRIVER:
            continue
        where = f"{label}: status.allocation.devices.config[{i}].opaque.parameters"
        params = opaque.get("parameters")
        if not isinstance(params, Mapping):
            raise ClaimError(f"{where} is {_shown(params)}, not an object")
        for key, value in params.items():
            if key in ("apiVersion", "kind"):
                expected = PARAMETERS_API_VERSION if key == "apiVersion" else PARAMETERS_KIND
                if value != expected:
                    raise ClaimError(f"{where}.{key} is {_shown(value)}, not {expected}")
            elif key in _CLASS_KEYS:
                if not isinstance(value, str) or not _NAME.fullmatch(value):
                    raise ClaimError(
                        f"{where}.{key}: class name {_shown(value)} is malformed: "
                        f"must match {CLASS_NAME_PATTERN}"
                    )
                asked[key] = value
            else:
                raise ClaimError(
                    f"{where}.{str(key)[:_SHOWN]}: unknown key (known: apiVersion, kind, "
                    f"{', '.join(_CLASS_KEYS)})"
                )
    for key, name in asked.items():
        kind = _CLASS_KEYS[key]
        configured = rules.configured.get(kind, frozenset())
        if name not in configured:
            raise ClaimError(
                f"{label}: {key} {name} is not configured (configured: "
                f"{', '.join(sorted(configured)) or 'none'})"
            )
        patterns = rules.access.get(kind, {}).get(name)
        if patterns is not None and not any(_glob(namespace, p) for p in patterns):
            raise ClaimError(
                f"{label}: {key} {name} is not allowed in namespace {namespace} "
                f"(classAccess.{kind}.{name}: {', '.join(patterns) or 'none'})"
            )
    return ClaimClasses(
        rdt=asked.get("rdtClass"), blockio=asked.get("blockioClass"), cpu=asked.get("cpuClass")
    )


def _glob(namespace: str, pattern: str) -> bool:
    from fnmatch import fnmatchcase

    return fnmatchcase(namespace, pattern)


def prepare_claim(
    claim: Mapping[str, Any],
    *,
    node_name: str,
    topology: Topology,
    offered: CPUSet,
    holders: Mapping[int, str],
    rules: ClassRules,
) -> PreparedClaim:
    """The claim prepared: its CPUs, memory nodes and classes. `offered`: the CPUs the driver
    may hand out (available, not reserved); `holders`: CPU -> who holds it exclusively now (a
    container or another claim). ClaimError naming the field or the holder otherwise."""
    label = _label(claim)
    uid = _get(claim, "metadata.uid")
    if not isinstance(uid, str) or not uid:
        raise ClaimError(f"{label}: metadata.uid is missing")
    devices = allocated_devices(claim, node_name)
    classes = claim_classes(claim, rules)
    cpus = CPUSet()
    results = _get(claim, "status.allocation.devices.results") or []
    ours = [r for r in results if isinstance(r, Mapping) and r.get("driver") == DRA_DRIVER]
    for device, result in zip(devices, ours, strict=True):
        cpu = cpu_of_device(device.device)
        if cpu is not None:
            picked = CPUSet.of(cpu)
            _check_free(label, device.device, picked, offered, holders)
        else:
            node = node_of_device(device.device)
            if node is None or node not in topology.nodes:
                raise ClaimError(f"{label}: device {device.device[:_SHOWN]} is not one of ours")
            count = _consumed(label, device.device, result)
            free = (topology.cpus_of_node(node) & offered) - CPUSet(holders) - cpus
            try:
                picked = allocate_cpus(topology, free, count)
            except NotEnoughCPUs:
                raise ClaimError(
                    f"{label}: device {device.device} asks for {count} CPUs of NUMA node "
                    f"{node}, only {len(free)} are free there ({free or 'none'})"
                    + _held_note(topology.cpus_of_node(node) & offered, holders)
                ) from None
        cpus = cpus | picked
    mems = topology.memory_nodes_of_cpus(cpus)
    return PreparedClaim(
        uid=uid,
        namespace=str(_get(claim, "metadata.namespace") or ""),
        name=str(_get(claim, "metadata.name") or ""),
        cpus=cpus,
        mems=mems,
        devices=tuple(devices),
        classes=classes,
    )


def _consumed(label: str, device: str, result: Mapping[str, Any]) -> int:
    consumed = result.get("consumedCapacity") or {}
    value: object = "1"
    if isinstance(consumed, Mapping):
        value = consumed.get(CAPACITY, consumed.get(f"{DRA_DRIVER}/{CAPACITY}", "1"))
    text = str(value)
    if not text.isdigit() or not 0 < int(text) <= 65536:
        raise ClaimError(
            f"{label}: device {device}: consumedCapacity.{CAPACITY} is {_shown(value)}, "
            "not a whole number of CPUs"
        )
    return int(text)


def _check_free(
    label: str, device: str, cpus: CPUSet, offered: CPUSet, holders: Mapping[int, str]
) -> None:
    if cpus - offered:
        raise ClaimError(
            f"{label}: device {device}: CPU {cpus - offered} is not offered on this node "
            "(reserved, not available or offline)"
        )
    for cpu in cpus:
        if cpu in holders:
            raise ClaimError(f"{label}: device {device}: CPU {cpu} is held by {holders[cpu]}")


def _held_note(cpus: CPUSet, holders: Mapping[int, str]) -> str:
    held = sorted({holders[c] for c in cpus if c in holders})
    return f"; held by {', '.join(held[:5])}" if held else ""
