"""Which runtime container is which admitted request, and what was last applied to it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from google.protobuf import json_format

from enforcer.cri import api_pb2


@dataclass
class Tracked:
    key: str  # the policy's key: pod uid/container name
    sandbox_id: str
    container_id: str | None = None  # None until the runtime answered CreateContainer
    cgroup_parent: str = ""  # the pod's, as kubelet sent it: where the container's cgroups are
    # kubelet's resources for the container (limits, shares); re-pinning sends them back whole
    # so the runtime never sees a zero it could take literally.
    resources: dict[str, Any] = field(default_factory=dict)
    applied_cpus: str | None = None
    applied_mems: str | None = None
    started: bool = False
    bound_at: int = 0  # Enforcer.sequence when the container id became known

    def linux_resources(self) -> api_pb2.LinuxContainerResources:
        return json_format.ParseDict(self.resources, api_pb2.LinuxContainerResources())

    def set_resources(self, resources: api_pb2.LinuxContainerResources) -> None:
        self.resources = json_format.MessageToDict(resources, preserving_proto_field_name=True)


@dataclass
class Ledger:
    by_key: dict[str, Tracked] = field(default_factory=dict)

    def by_container(self, container_id: str) -> Tracked | None:
        for tracked in self.by_key.values():
            if tracked.container_id == container_id:
                return tracked
        return None

    def of_sandbox(self, sandbox_id: str) -> list[Tracked]:
        return [t for t in self.by_key.values() if t.sandbox_id == sandbox_id]

    def to_state(self) -> list[dict[str, Any]]:
        # Shallow copies: asdict's deep copy cost more than the rest of a CreateContainer.
        return [dict(vars(t)) for t in self.by_key.values()]

    @classmethod
    def from_state(cls, entries: list[dict[str, Any]]) -> Ledger:
        return cls({e["key"]: Tracked(**e) for e in entries})
