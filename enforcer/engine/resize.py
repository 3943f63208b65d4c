"""Resize: kubelet's own update of a running container. Its limits apply and our pinning stays;
a changed CPU request or limit (an in-place resize) is placed anew first, or refused when it does
not fit. Runs on the engine's worker.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from enforcer.decode import ContainerRequest, KubeletResources, estimate_from_cri
from enforcer.engine.kubelet_record import KubeletRecord
from enforcer.engine.model import Pinning
from enforcer.engine.registry import StateWriteFailed
from enforcer.engine.repin import Repinner
from enforcer.engine.shared import Shared, log
from enforcer.policy import PlacementError
from enforcer.refusal import Refusal


class Resizer:
    def __init__(self, shared: Shared, repinner: Repinner) -> None:
        self.s = shared
        self.repinner = repinner

    def update(
        self, container_id: str, kubelet: KubeletResources, resources: KubeletRecord
    ) -> Pinning | None:
        """See `Enforcer.update`."""
        s = self.s
        entry = s.registry.by_container(container_id)
        if entry is None:
            return None
        before = s.registry.decision(entry.key)
        resized = resized_request(before.request, kubelet)
        if resized is None:
            # Nothing to decide: kubelet's values go with the pinning the container has, and
            # are written lazily, so a state that cannot be written now does not hold them up.
            pinning = s.wanted(entry.key)
            s.registry.touch(
                entry.key, resources=resources, applied_cpus=pinning.cpus, applied_mems=pinning.mems
            )
            return pinning
        s.may_decide()
        try:
            with s.registry.change():
                s.registry.admit(resized, keep=before.exclusive or None)
                pinning = s.wanted(entry.key)
                s.registry.update(
                    entry.key,
                    resources=resources,
                    applied_cpus=pinning.cpus,
                    applied_mems=pinning.mems,
                )
        except (PlacementError, StateWriteFailed) as exc:
            raise Refusal(exc.reason, f"resize refused: {exc}") from None
        log.info(
            "resized %s: CPU request %dm -> %dm",
            entry.key,
            before.request.cpu_request_milli,
            resized.cpu_request_milli,
        )
        self.repinner.repin()
        return pinning


def resized_request(
    request: ContainerRequest, kubelet: KubeletResources
) -> ContainerRequest | None:
    """The request with kubelet's new CPU and memory values, or None when they are unchanged.

    An update with no CPU shares, quota or memory limit at all (each 0: "leave it") only sets
    a cpuset, as kubelet's CPU manager reconcile does: that is not a resize (kubelet never asks
    for fewer than 2 shares)."""
    if not (kubelet.cpu_shares or kubelet.cpu_quota or kubelet.memory_limit):
        return None
    numbers = estimate_from_cri(kubelet)
    changed: dict[str, Any] = {
        name: numbers[name]
        for name in ("cpu_request_milli", "cpu_limit_milli", "memory_limit")
        if numbers[name] != getattr(request, name)
    }
    # kubelet's shares only pin the request down to within a milli-CPU; ignore such noise.
    if (
        set(changed) == {"cpu_request_milli"}
        and abs(changed["cpu_request_milli"] - request.cpu_request_milli) <= 2
    ):
        return None
    if not changed:
        return None
    if "memory_limit" in changed and request.memory_request > changed["memory_limit"] > 0:
        changed["memory_request"] = changed["memory_limit"]
    return replace(request, **changed)
