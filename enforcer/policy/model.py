"""The policies' plain data: what a container was given, and why a request was refused."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

from enforcer.decode import ContainerRequest, Preferences
from enforcer.decode.request import COUNT
from enforcer.refusal import Reason, Refusal
from enforcer.topology import CPUSet
from resource_contract.affinity import terms_from_data, terms_to_data

PlacementKind = Literal[
    "exclusive", "mixed", "shared", "reserved", "preserved", "unmanaged", "held", "balloon"
]


@dataclass(frozen=True)
class Placement:
    """Where a container runs. `cpus`/`mems` None: leave what kubelet asked for untouched."""

    cpus: CPUSet | None
    mems: CPUSet | None
    exclusive: CPUSet
    kind: PlacementKind
    pool: str


@dataclass(frozen=True)
class Admitted:
    """One admitted container as the policy remembers it: enough to rebuild every decision."""

    request: ContainerRequest
    kind: PlacementKind
    exclusive: CPUSet = field(default_factory=CPUSet)
    pool: str = "root"
    # Milli-CPU granted on the pool's shared CPUs: a shared container's request, or the
    # fractional part of a mixed one.
    shared_milli: int = field(default=0, metadata=COUNT)

    def to_dict(self) -> dict[str, Any]:
        return self._state

    @cached_property
    def _state(self) -> dict[str, Any]:
        # Entries never change, and the state file is written after every event: serialise
        # each entry once (shallow: the request's other fields are plain values).
        request = {
            **vars(self.request),
            "preferences": vars(self.request.preferences),
            "kubelet_cpus": str(self.request.kubelet_cpus),
            "kubelet_mems": str(self.request.kubelet_mems),
            "affinity": terms_to_data(self.request.affinity),
            "labels": [list(pair) for pair in self.request.labels],
            "devices": list(self.request.devices),
            "device_nodes": list(self.request.device_nodes),
        }
        return {
            "request": request,
            "kind": self.kind,
            "exclusive": str(self.exclusive),
            "pool": self.pool,
            "shared_milli": self.shared_milli,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Admitted:
        req = dict(data["request"])
        req["preferences"] = Preferences(**_saved(req, "preferences", dict, {}))
        for name in ("kubelet_cpus", "kubelet_mems"):
            req[name] = CPUSet.parse(_saved(req, name, str, ""))
        req["affinity"] = terms_from_data(_saved(req, "affinity", list, []))
        labels = _saved(req, "labels", list, [])
        if not all(
            isinstance(pair, list) and len(pair) == 2 and all(isinstance(s, str) for s in pair)
            for pair in labels
        ):
            raise ValueError(f"labels is {labels!r}, not a list of [name, value] string pairs")
        req["labels"] = tuple((name, value) for name, value in labels)
        devices = _saved(req, "devices", list, [])
        nodes = _saved(req, "device_nodes", list, [])
        if not all(isinstance(d, str) for d in devices):
            raise ValueError(f"devices is {devices!r}, not a list of strings")
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in nodes):
            raise ValueError(f"device_nodes is {nodes!r}, not a list of NUMA node numbers")
        req["devices"], req["device_nodes"] = tuple(devices), tuple(nodes)
        return cls(
            request=ContainerRequest(**req),
            kind=data["kind"],
            exclusive=CPUSet.parse(data.get("exclusive", "")),
            pool=data.get("pool", "root"),
            shared_milli=data.get("shared_milli", 0),
        )


_SHAPES: dict[type, str] = {dict: "an object", list: "an array", str: "a string"}


def _saved(request: dict[str, Any], name: str, kind: type, default: Any) -> Any:
    """A saved request's field written as a `kind`; its default when missing or null (states
    written before the field existed). ValueError for anything else: a damaged value is never
    read as the default."""
    value = request.get(name)
    if value is None:
        return default
    if not isinstance(value, kind):
        shape = _SHAPES[kind]
        raise ValueError(f"{name} is {value!r}, not {shape}")
    return value


@dataclass(frozen=True)
class PoolView:
    """One pool of a policy's pool tree, for `status` and `plan` (a snapshot, not live)."""

    name: str
    depth: int  # 0 for the root
    cpus: CPUSet
    shared: CPUSet  # where its shared containers run now
    exclusive: CPUSet  # held exclusively by containers (isolated CPUs included)
    free: int  # CPUs that could still be handed out exclusively (isolated included)
    shared_milli: int  # CPU requests granted to shared containers placed in it or below
    containers: int  # containers placed in it or below
    mems: CPUSet  # its memory nodes: its CPUs' nodes plus their memory-only nodes
    memory_capacity: int  # bytes; 0 when the topology does not know
    memory_used: int  # bytes charged to its memory nodes


@dataclass(frozen=True)
class BalloonView:
    """One balloon for `status`, `plan` and the metrics (a snapshot)."""

    type: str
    instance: int
    name: str
    cpus: CPUSet
    containers: tuple[str, ...]  # registry keys
    milli: int  # CPU requested by its containers
    shared_idle: CPUSet  # idle CPUs its containers also run on
    cpu_class: str | None


class PlacementError(Refusal):
    """A container the policy cannot place: the node has no room for it.

    `nearest_pool`: the pool that came closest (the one the message names as the best), where
    the policy has pools to compare; None otherwise."""

    def __init__(
        self, message: str, reason: Reason = Reason.NO_ROOM, *, nearest_pool: str | None = None
    ) -> None:
        super().__init__(reason, message)
        self.nearest_pool = nearest_pool
