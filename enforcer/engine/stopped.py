"""The containers kubelet stopped, remembered (bounded) for as long as the runtime may still list
them: never adopted again on that account, and stuck when the runtime keeps them too long (see
enforcer.engine.adoption)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from enforcer.engine.model import LiveContainer

# A container kubelet stopped that the runtime lists this long after is stuck (containerd:
# "container is in starting state, can't be removed"); before, it is on its way out.
STUCK_AFTER_SECONDS = 10.0
# Stopped containers remembered at most (the oldest forgotten first): bounded whatever the
# runtime and kubelet do.
MAX_STOPPED = 4096


@dataclass(frozen=True)
class Stopped:
    """A container kubelet stopped (the engine released it), as remembered."""

    key: str
    why: str  # "stopped", "pod stopped", ...
    at: float  # the engine's clock


class StoppedContainers:
    """Containers kubelet stopped, by runtime id, for as long as the runtime may list them."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._stopped: OrderedDict[str, Stopped] = OrderedDict()

    def __contains__(self, container_id: str) -> bool:
        return container_id in self._stopped

    def __len__(self) -> int:
        return len(self._stopped)

    def remember(self, container_id: str, key: str, why: str) -> None:
        self._stopped.pop(container_id, None)
        while len(self._stopped) >= MAX_STOPPED:
            self._stopped.popitem(last=False)
        self._stopped[container_id] = Stopped(key, why, self.clock())

    def forget(self, container_id: str) -> None:
        self._stopped.pop(container_id, None)

    def stuck(self, container_id: str) -> Stopped | None:
        """The container's stop, when the runtime should have removed it by now."""
        stopped = self._stopped.get(container_id)
        if stopped is None or self.clock() - stopped.at < STUCK_AFTER_SECONDS:
            return None
        return stopped

    def listed(self, containers: Iterable[LiveContainer]) -> None:
        """A complete listing: those it shows exited or no longer shows are gone for good."""
        live = {c.id for c in containers if not c.exited}
        for container_id in [c for c in self._stopped if c not in live]:
            del self._stopped[container_id]
