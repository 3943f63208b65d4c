"""A Synchronize that the runtime split into parts, put back together (bounded).

NRI v0.7 and later send the runtime's pods and containers in several Synchronize requests when
one message would be too long: each part but the last has ``more`` set and must be answered
with ``more`` set and no updates (else the runtime closes the plugin: "plugin does not handle
split sync requests"); the last part is answered as a whole Synchronize is. v0.6.1 never sets
``more``. The parts are held until the last one, up to ``MAX_SYNC_BYTES`` together: a runtime
that sends more than that is refused, and the plugin registers again.
"""

from __future__ import annotations

from enforcer.nriapi import api_pb2

# 64 MiB: 250 pods (a large maxPods) with Kubernetes' largest annotations (256 KiB each) fit.
MAX_SYNC_BYTES = 64 << 20


class SyncTooLarge(Exception):
    """The parts of one Synchronize exceed MAX_SYNC_BYTES together."""


class SyncParts:
    """The parts received so far of the current connection's Synchronize."""

    def __init__(self, limit: int = MAX_SYNC_BYTES) -> None:
        self.limit = limit
        self._pods: list[api_pb2.PodSandbox] = []
        self._containers: list[api_pb2.Container] = []
        self._bytes = 0

    def clear(self) -> None:
        self._pods, self._containers, self._bytes = [], [], 0

    def add(
        self, request: api_pb2.SynchronizeRequest, size: int
    ) -> tuple[list[api_pb2.PodSandbox], list[api_pb2.Container]] | None:
        """Takes one part (``size``: its bytes); returns every pod and container once the last
        part is in, None while more are to come."""
        if self._bytes + size > self.limit:
            self.clear()
            raise SyncTooLarge(
                f"a Synchronize split into parts of over {self.limit} bytes together"
            )
        self._pods.extend(request.pods)
        self._containers.extend(request.containers)
        self._bytes += size
        if request.more:
            return None
        whole = self._pods, self._containers
        self.clear()
        return whole

    @property
    def pending(self) -> bool:
        return self._bytes > 0
