"""The policies' plain data: what a container was given, and why a request was refused."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import grpc

from enforcer.decode import ContainerRequest, Preferences
from enforcer.topology import CPUSet

PlacementKind = Literal["exclusive", "shared", "reserved", "preserved", "unmanaged"]


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
    # Shared part of a mixed (fractional) container, or the pool a shared container lives in.
    shared_milli: int = 0

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["exclusive"] = str(self.exclusive)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Admitted:
        req = dict(data["request"])
        req["preferences"] = Preferences(**req.get("preferences") or {})
        return cls(
            request=ContainerRequest(**req),
            kind=data["kind"],
            exclusive=CPUSet.parse(data.get("exclusive", "")),
            pool=data.get("pool", "root"),
            shared_milli=data.get("shared_milli", 0),
        )


class PlacementError(Exception):
    """A container the policy cannot place; `code` is the gRPC status CreateContainer fails with."""

    def __init__(self, message: str, code: grpc.StatusCode = grpc.StatusCode.RESOURCE_EXHAUSTED):
        super().__init__(message)
        self.code = code
