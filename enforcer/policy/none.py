"""Policy `none`: containers run as kubelet asked; they are still tracked and shown."""

from __future__ import annotations

from enforcer.decode import ContainerRequest
from enforcer.policy.base import Policy
from enforcer.policy.model import Admitted, Placement
from enforcer.topology import CPUSet


class NonePolicy(Policy):
    name = "none"

    def admit(self, request: ContainerRequest, *, keep: CPUSet | None = None) -> Placement:
        self.admitted[request.key] = Admitted(request, "unmanaged", pool="none")
        return self.placement(request.key)

    def placement(self, key: str) -> Placement:
        return Placement(None, None, CPUSet(), "unmanaged", "none")
