"""The engine's plain values: a container's entry in the registry, what the runtime reports,
and what the engine asks a transport to apply. No transport types."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from enforcer.decode import ContainerCreate
from enforcer.engine.kubelet_record import KubeletRecord


@dataclass(frozen=True)
class DeviceFacts:
    """The devices kubelet gave one container, as `ContainerRequest.devices`/`device_nodes`
    take them: names, and the NUMA nodes they report (none when they report none)."""

    devices: tuple[str, ...] = ()
    nodes: tuple[int, ...] = ()


class Phase(enum.Enum):
    """Where a container is in its life, as far as the enforcer knows."""

    CREATING = "creating"  # admitted; the runtime has not answered yet
    CREATED = "created"  # the runtime gave it an id
    RUNNING = "running"  # started
    # The creation's outcome is unknown (cancelled, deadline, relay restarted mid-call): the
    # runtime has the last word, and until it speaks the container keeps what it holds.
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Entry:
    """One container the registry knows, besides its decision (which the policy keeps)."""

    key: str  # pod uid/container name: stable across CreateContainer retries
    sandbox_id: str
    phase: Phase = Phase.CREATING
    container_id: str | None = None
    cgroup_parent: str = ""  # the pod's, as kubelet set it: where the container's cgroups are
    # What kubelet asked the runtime for (no transport's form): a re-pin sends it back whole,
    # so the runtime never sees a zero it could take literally.
    resources: KubeletRecord = field(default_factory=KubeletRecord)
    applied_cpus: str | None = None  # what the enforcer last had the runtime apply
    applied_mems: str | None = None
    verified: bool = False  # the kernel was read back and matched
    problem: str | None = None  # why the kernel does not have its decision (shown by `status`)
    unplaced: str | None = None  # why the configuration cannot place it (it is held)
    # Why it runs on the shared pool rather than as it asked (adopted, or placed again, while
    # its CPUs were not free), and its own shared preference: placed as asked once they are.
    demoted: str | None = None
    asked_shared: bool | None = None
    # Why it is kept though kubelet stopped it: the runtime still lists it live (it could not
    # remove it); released once the runtime shows it exited or gone, or removes it.
    stuck: str | None = None
    bound_at: int = 0  # the registry's sequence when the container id became known
    unknown_since: float = 0.0  # monotonic time the creation's outcome became unknown

    def to_dict(self) -> dict[str, Any]:
        data = dict(vars(self))
        data["phase"] = self.phase.value
        data["resources"] = self.resources.to_dict()
        del data["unknown_since"], data["bound_at"]  # this process's clocks
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Entry:
        data = dict(data)
        if "phase" in data:
            phase = Phase(data.pop("phase"))
        else:  # written before phases: `started` said running
            phase = Phase.RUNNING if data.get("started") else Phase.CREATED
        data.pop("started", None)
        data.pop("bound_at", None)
        if data.get("container_id") is None:
            phase = Phase.UNKNOWN  # admitted by an earlier process, never answered
        # A record saved before the neutral form (CRI's JSON) is read into it here.
        data["resources"] = KubeletRecord.from_saved(data.get("resources", {}))
        known = {f for f in cls.__dataclass_fields__}
        return cls(phase=phase, **{k: v for k, v in data.items() if k in known and k != "phase"})


@dataclass(frozen=True)
class LiveContainer:
    """A container as the runtime lists it."""

    id: str
    sandbox_id: str
    key: str | None  # pod uid/container name from kubelet's labels; None when not kubelet's
    running: bool
    exited: bool


@dataclass(frozen=True)
class Recorded:
    """What a running container was created with, read back from the runtime (to adopt it)."""

    create: ContainerCreate
    resources: KubeletRecord  # as in Entry.resources
    running_cpus: str  # its cpuset now ("" when unknown)
    running_mems: str


@dataclass(frozen=True)
class Pinning:
    """The cpuset and memory nodes a container must have ("" leaves the runtime's value)."""

    cpus: str
    mems: str
