"""The DRA driver over the engine: kubelet's prepare and unprepare of a claim (read from the API
server, prepared by `enforcer.dra.claims`, held in the registry by the engine, marked by a CDI
spec), and the devices this node offers now (for the ResourceSlices).

Engine work runs on the engine's worker (`on_worker`), one call at a time with every runtime
event, so a claim's CPUs and a container's exclusive CPUs are decided in one order. The API
server is read before, off the worker.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from enforcer.decode.dra_claims import cdi_device_id
from enforcer.dra import cdi
from enforcer.dra.claims import ClaimError, ClassRules, allocated_devices, prepare_claim
from enforcer.dra.devices import CPUDetails, allocatable_cpus, build_devices
from enforcer.dra.kubelet_plugin import ClaimRef, Prepared
from enforcer.engine import Enforcer
from enforcer.engine import claimed as engine_claims
from enforcer.topology import CPUSet

log = logging.getLogger(__name__)

T = TypeVar("T")
ReadClaim = Callable[[str, str], Mapping[str, Any]]  # (namespace, name) -> the claim's JSON
OnWorker = Callable[[Callable[[], T]], T]


def class_rules(enforcer: Enforcer) -> ClassRules:
    config = enforcer.config
    return ClassRules(
        configured={
            "rdt": frozenset(config.configured_classes("rdt")),
            "blockio": frozenset(config.configured_classes("blockio")),
            "cpu": frozenset(config.cpuClasses),
        },
        access={
            "rdt": {k: tuple(v) for k, v in config.classAccess.rdt.items()},
            "blockio": {k: tuple(v) for k, v in config.classAccess.blockio.items()},
            "cpu": {k: tuple(v) for k, v in config.classAccess.cpu.items()},
        },
    )


class DRADriver:
    """The ClaimHandler of the kubelet plugin, and the source of the node's devices."""

    def __init__(
        self,
        enforcer: Enforcer,
        *,
        node_name: str,
        read_claim: ReadClaim,
        on_worker: OnWorker[Any],
        cdi_dir: str | Path = cdi.DEFAULT_CDI_DIR,
        details: Mapping[int, CPUDetails] | None = None,
    ) -> None:
        self.enforcer = enforcer
        self.node_name = node_name
        self.read_claim = read_claim
        self.on_worker = on_worker
        self.cdi_dir = Path(cdi_dir)
        self.details = dict(details or {})
        # The CPUs online now, as the app last read them from sysfs (None: not read, those
        # online at start). Replaced whole by the app, read by the worker.
        self.online: CPUSet | None = None

    # -- kubelet ----------------------------------------------------------------------------

    def prepare(self, ref: ClaimRef) -> Prepared:
        claim = self.read_claim(ref.namespace, ref.name)
        uid = (claim.get("metadata") or {}).get("uid")
        if uid != ref.uid:
            raise ClaimError(
                f"claim {ref.namespace}/{ref.name}: the API server has uid {uid}, kubelet asks "
                f"for {ref.uid} (deleted and made again?)"
            )
        devices = tuple(allocated_devices(claim, self.node_name))

        def hold() -> CPUSet:
            enforcer = self.enforcer
            held = engine_claims.claims(enforcer.policy).get(ref.uid)
            if held is not None:
                return held.exclusive  # prepared before (kubelet retries, or we restarted)
            policy = enforcer.policy
            prepared = prepare_claim(
                claim,
                node_name=self.node_name,
                topology=enforcer.topology,
                offered=self._online_only(policy.available - policy.reserved),
                holders=engine_claims.holders(policy),
                rules=class_rules(enforcer),
            )
            request = engine_claims.claim_request(
                prepared.uid,
                prepared.namespace,
                prepared.name,
                rdt_class=prepared.classes.rdt,
                blockio_class=prepared.classes.blockio,
                cpu_class=prepared.classes.cpu,
            )
            enforcer.hold_claim(request, prepared.cpus)
            return prepared.cpus

        cpus = self.on_worker(hold)
        cdi.write_spec(self.cdi_dir, ref.uid)
        log.info("prepared claim %s/%s (%s): cpus %s", ref.namespace, ref.name, ref.uid, cpus)
        return Prepared(devices=devices, cdi_ids=(cdi_device_id(ref.uid),))

    def unprepare(self, ref: ClaimRef) -> None:
        released = self.on_worker(lambda: self.enforcer.release_claim(ref.uid))
        cdi.remove_spec(self.cdi_dir, ref.uid)
        if released:
            log.info("unprepared claim %s/%s (%s)", ref.namespace, ref.name, ref.uid)

    # -- the ResourceSlices -----------------------------------------------------------------

    def _online_only(self, cpus: CPUSet) -> CPUSet:
        online = self.online
        return cpus if online is None else cpus & online

    def devices(self) -> list[dict[str, Any]]:
        """The devices to publish now (call on the worker): CPUs available, not reserved, not
        held exclusively by a container and online (`self.online`, read again from sysfs by
        the app; until then, those online at start). A prepared claim's CPUs stay published
        while the configuration offers them, even one gone offline: the scheduler counts them
        as the claim's (in `grouped` mode, as consumed capacity), so the free devices or
        capacity it sees are the CPUs really free, never one a claim holds. CPUs that came
        online after the start are not offered: the enforcer's topology was read then."""
        enforcer = self.enforcer
        policy = enforcer.policy
        by_containers = CPUSet(
            cpu
            for admitted in policy.admitted.values()
            if not engine_claims.is_claim(admitted)
            for cpu in admitted.exclusive
        )
        offered = allocatable_cpus(policy.available, policy.reserved, by_containers)
        online = self.online
        if online is not None:
            claimed = CPUSet().union(
                *(held.exclusive for held in engine_claims.claims(policy).values())
            )
            offered = (offered & online) | (offered & claimed)
        return build_devices(
            enforcer.topology,
            offered,
            enforcer.config.dra.mode,
            self.details,
            policy.cpu_classes(),
        )
