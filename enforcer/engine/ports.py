"""What the engine needs from the world: the runtime and the kernel, as small interfaces.

Each transport implements `Runtime` (the CRI client, the NRI plugin); the kernel is reached
through the controllers (`enforcer.controllers.base`). The engine sees only these and domain
values.
"""

from __future__ import annotations

from typing import Protocol

from enforcer.engine.kubelet_record import KubeletRecord
from enforcer.engine.model import DeviceFacts, LiveContainer, Pinning, Recorded


class RuntimeAway(Exception):
    """The runtime could not be asked (down, restarting, timed out)."""


class ContainerMissing(Exception):
    """The runtime does not have the container (any more)."""


class RecordUnusable(RuntimeError):
    """The transport cannot send its saved record of kubelet's resources for a container (a
    damaged saved state): the engine takes the runtime's own record (`recorded`) instead."""


class DeviceSource(Protocol):
    def devices_of(self, namespace: str, pod: str, container: str) -> DeviceFacts | None:
        """The devices kubelet gave a container and their NUMA nodes; None when kubelet could
        not be asked (the source logs why): the decision is then made without them."""
        ...


class Runtime(Protocol):
    def list_containers(self) -> list[LiveContainer]:
        """Every container the runtime has; RuntimeAway when it cannot be asked."""
        ...

    def repin(self, container_id: str, resources: KubeletRecord, pinning: Pinning) -> KubeletRecord:
        """Moves a container to `pinning`, sending kubelet's `resources` with it; returns the
        resources as sent. ContainerMissing, RuntimeAway, RecordUnusable when `resources`
        cannot be sent (its `damage`), or RuntimeError for a refusal."""
        ...

    def recorded(self, container: LiveContainer) -> Recorded | None:
        """What a running container was created with; None when the runtime did not keep it.
        RuntimeAway when it cannot be asked."""
        ...
