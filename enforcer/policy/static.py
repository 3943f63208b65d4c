"""kubelet's CPU manager static policy, done right.

Guaranteed containers with a whole-CPU request get CPUs of their own, taken along the
topology, unless they prefer shared CPUs (`prefer-shared-cpus`); every other container runs
on the shared pool: all available CPUs that nobody holds, reserved ones included. A preserved
container (`cpu.preserve`) keeps the CPUs kubelet asked for that are in the shared pool.
kubelet's policy options (`fullPCPUsOnly` and the others, `kubelet_options`) shape the
exclusive CPUs as kubelet's do.
"""

from __future__ import annotations

from dataclasses import replace

from enforcer.cpuallocator import NotEnoughCPUs, SMTAlignmentError, take_cpus
from enforcer.decode import ContainerRequest
from enforcer.policy.base import Policy
from enforcer.policy.device_locality import close_cpus, device_mems
from enforcer.policy.kubelet_options import (
    check_machine,
    cpu_options,
    smt_refusal,
    strict_reserved,
)
from enforcer.policy.model import Admitted, Placement, PlacementError
from enforcer.topology import CPUSet, Topology
from resource_contract.policy_config import PolicyConfig


class StaticPolicy(Policy):
    name = "static"

    def __init__(self, topology: Topology, config: PolicyConfig) -> None:
        super().__init__(topology, config)
        check_machine(topology, config)
        self.cpu_options = cpu_options(config)

    # The shared pool is asked for once per container on every re-pin sweep: kept until the
    # admissions change rather than recomputed from all of them each time.
    _shared_pool: CPUSet | None = None

    @property
    def shared_pool(self) -> CPUSet:
        if self._shared_pool is None:
            self._shared_pool = self.available - self.taken
        return self._shared_pool

    def release(self, key: str) -> Admitted | None:
        self._shared_pool = None
        return super().release(key)

    def reinstate(self, entry: Admitted) -> None:
        super().reinstate(entry)
        self._shared_pool = None

    def _exclusive_free(self) -> CPUSet:
        free = self.available - self.reserved - self.taken
        if (not self.reserved or self.config.strictCPUReservation) and free:
            # The shared pool must never be empty: without reserved CPUs (or with reserved
            # CPUs that only reservedNamespaces share, strictCPUReservation) keep one back.
            free = free - CPUSet.of(max(free))
        return free

    def admit(self, request: ContainerRequest, *, keep: CPUSet | None = None) -> Placement:
        previous = self.release(request.key)
        if request.preferences.preserve:
            try:
                self.preserved_cut(request)
            except PlacementError:
                self._readmit(previous)
                raise
            entry = Admitted(request, "preserved")
        elif (count := request.exclusive_cpus) and not request.preferences.shared:
            entry = Admitted(request, "exclusive", self._take(request, count, keep, previous))
        else:
            entry = Admitted(request, "shared", pool="shared")
        self.admitted[request.key] = entry
        self._shared_pool = None
        return self.placement(request.key)

    def _take(
        self, request: ContainerRequest, count: int, keep: CPUSet | None, previous: Admitted | None
    ) -> CPUSet:
        free = self._exclusive_free()
        for wanted in (keep, previous.exclusive if previous else None):
            if wanted and len(wanted) == count and wanted <= free:
                return wanted
        close = close_cpus(self.topology, self.config, request, free, count)
        if close.cpus is not None:
            try:
                taken = take_cpus(self.topology, close.cpus, count, self.cpu_options)
                self._note_devices(request.key, close.note)
                return taken
            except (NotEnoughCPUs, SMTAlignmentError) as exc:
                close = replace(close, note=f"{close.note}: not under the options ({exc})")
        self._note_devices(request.key, close.note)
        try:
            return take_cpus(self.topology, free, count, self.cpu_options)
        except SMTAlignmentError as exc:
            self._readmit(previous)
            raise smt_refusal(request, exc) from None
        except NotEnoughCPUs:
            self._readmit(previous)
            raise PlacementError(
                f"pod {request.namespace}/{request.pod_name} container {request.container}: "
                f"asked for {count} exclusive CPUs, {len(free)} free"
                + (f" ({free})" if free else "")
                + f"; shared pool {self.shared_pool}, reserved {self.reserved or 'none'}"
            ) from None

    def _readmit(self, previous: Admitted | None) -> None:
        """A refusal changes nothing: the entry it replaced comes back."""
        if previous is not None:
            self.admitted[previous.request.key] = previous
            self._shared_pool = None

    def preserve_allowed(self, request: ContainerRequest) -> CPUSet:
        # Like every shared container here, reserved CPUs included (kubelet's static policy).
        return self._shared_for(request)

    def _shared_for(self, request: ContainerRequest) -> CPUSet:
        """The shared pool, less the reserved CPUs under strictCPUReservation for a pod
        outside reservedNamespaces (never empty: a CPU is kept out of exclusive use)."""
        off = strict_reserved(self.config, self.reserved, request)
        return self.shared_pool - off if off else self.shared_pool

    def placement(self, key: str) -> Placement:
        entry = self.admitted[key]
        if entry.kind == "preserved":
            cpus = self.preserved_cpus(entry.request)
            return Placement(cpus, None, CPUSet(), "preserved", "none")
        if entry.kind == "exclusive":
            mems = device_mems(self.topology, self.config, entry.request, entry.exclusive)
            return Placement(entry.exclusive, mems, entry.exclusive, "exclusive", "exclusive")
        if entry.kind == "held":
            return Placement(entry.exclusive, None, entry.exclusive, "held", entry.pool)
        return Placement(self._shared_for(entry.request), None, CPUSet(), "shared", "shared")
