"""What every policy does: admit, release, and say where each admitted container runs.

Policies are plain Python over plain data: no files, no sockets, no runtime. The relay and
`resource-enforcer plan` drive the very same objects.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar

from enforcer.cpuallocator import NotEnoughCPUs, allocate_cpus
from enforcer.decode import ContainerRequest
from enforcer.policy.device_locality import described
from enforcer.policy.model import Admitted, BalloonView, Placement, PlacementError, PoolView
from enforcer.topology import CPUSet, Topology
from resource_contract.config import ConfigError
from resource_contract.policy_config import PolicyConfig, reserved_is_quantity
from resource_contract.quantities import parse_quantity


def resolve_cpu_sets(topology: Topology, config: PolicyConfig) -> tuple[CPUSet, CPUSet]:
    """(available, reserved) CPUs; ConfigError naming the key when they do not fit the machine."""
    online = topology.online
    available = online
    if config.availableCPUs is not None:
        available = CPUSet.parse(config.availableCPUs)
        if missing := available - online:
            raise ConfigError(
                [
                    f"policy.availableCPUs: CPUs {missing} are not online on this machine "
                    f"(online: {online})"
                ]
            )
    value = config.reservedCPUs
    if value is None:
        return available, CPUSet()
    if reserved_is_quantity(value):
        count = math.ceil(parse_quantity(value))  # a fraction of a CPU still reserves a CPU
        try:
            reserved = allocate_cpus(topology, available, count) if count else CPUSet()
        except NotEnoughCPUs:
            raise ConfigError(
                [
                    f"policy.reservedCPUs: {value} CPUs do not fit in the {len(available)} "
                    f"available CPUs ({available})"
                ]
            ) from None
        return available, reserved
    reserved = CPUSet.parse(str(value))
    if outside := reserved - available:
        raise ConfigError(
            [
                f"policy.reservedCPUs: CPUs {outside} are not available on this machine "
                f"(available: {available})"
            ]
        )
    return available, reserved


class AdmittedMap(dict[str, Admitted]):
    """The admitted entries, keeping the union of their exclusive CPUs up to date as entries
    come and go (a count of holders per CPU), so that a decision does not walk every
    container on the machine to learn which CPUs are taken."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        self._holders: dict[int, int] = {}
        self._taken: CPUSet | None = CPUSet()
        self.update(*args, **kwargs)

    def _hold(self, cpus: CPUSet, step: int) -> None:
        if not cpus:
            return
        holders = self._holders
        for cpu in cpus:
            count = holders.get(cpu, 0) + step
            if count:
                holders[cpu] = count
            else:
                del holders[cpu]
        self._taken = None

    def taken(self) -> CPUSet:
        """CPUs held exclusively by some entry."""
        if self._taken is None:
            self._taken = CPUSet._checked(self._holders)
        return self._taken

    def __setitem__(self, key: str, value: Admitted) -> None:
        old = super().get(key)
        super().__setitem__(key, value)
        self._hold(value.exclusive, 1)
        if old is not None:
            self._hold(old.exclusive, -1)

    def __delitem__(self, key: str) -> None:
        old = self[key]
        super().__delitem__(key)
        self._hold(old.exclusive, -1)

    def pop(self, key: str, *default: Any) -> Any:
        if key in self:
            old = super().pop(key)
            self._hold(old.exclusive, -1)
            return old
        return super().pop(key, *default)

    def popitem(self) -> tuple[str, Admitted]:
        key, old = super().popitem()
        self._hold(old.exclusive, -1)
        return key, old

    def clear(self) -> None:
        super().clear()
        self._holders.clear()
        self._taken = CPUSet()

    def update(self, *args: Any, **kwargs: Any) -> None:
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def setdefault(self, key: str, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]

    def __ior__(self, other: Any) -> AdmittedMap:  # type: ignore[override,misc]
        self.update(other)
        return self


class Policy(ABC):
    """A policy's state is `admitted`: a key (pod uid/container) -> Admitted entry."""

    name: ClassVar[str]
    # Whether shared containers also run on the reserved (and isolated) CPUs, as with kubelet.
    reserved_shared: ClassVar[bool] = True

    def __init__(self, topology: Topology, config: PolicyConfig) -> None:
        self.topology = topology
        self.config = config
        self.available, self.reserved = resolve_cpu_sets(topology, config)
        self._admitted = AdmittedMap()
        # Admitted key -> how policy.preferCloseToDevices placed it (device_locality).
        self._device_notes: dict[str, str] = {}

    @property
    def admitted(self) -> dict[str, Admitted]:
        return self._admitted

    @admitted.setter
    def admitted(self, entries: dict[str, Admitted]) -> None:
        self._admitted = AdmittedMap(entries)

    @abstractmethod
    def admit(self, request: ContainerRequest, *, keep: CPUSet | None = None) -> Placement:
        """Admits request (replacing an entry of the same key) and returns its placement.

        `keep`: CPUs the container already runs on (restart, reconfiguration); the policy
        keeps them when it can, so a running container does not move.
        Raises PlacementError when the container cannot be placed.
        """

    @abstractmethod
    def placement(self, key: str) -> Placement:
        """Where an admitted container runs now (shared pools change as others come and go)."""

    def release(self, key: str) -> Admitted | None:
        return self.admitted.pop(key, None)

    def reinstate(self, entry: Admitted) -> None:
        """Puts back an entry exactly as it was decided (a rolled-back change): no decision."""
        self.release(entry.request.key)
        self.admitted[entry.request.key] = entry

    def hold(self, request: ContainerRequest, cpus: CPUSet) -> Placement:
        """Keeps a running container on `cpus`, which nobody else gets, whatever the
        configuration says: for a container the policy cannot place but that still runs."""
        entry = Admitted(request, "held", cpus & self.topology.online, pool="none")
        self.reinstate(entry)
        return self.placement(request.key)

    def placements(self) -> dict[str, Placement]:
        return {key: self.placement(key) for key in self.admitted}

    def pools(self) -> list[PoolView]:
        """The policy's pool tree, root first (empty for policies without pools)."""
        return []

    def balloon_views(self) -> list[BalloonView]:
        """The policy's balloons (only the balloons policy has any)."""
        return []

    def cpu_classes(self) -> dict[int, str]:
        """CPU -> the CPU class the policy wants it in (CPUs without one are left out)."""
        return {}

    def cpu_class_ignored(self, key: str) -> str | None:
        """Why the CPU class an admitted container's annotation asks for is not applied to its
        CPUs; None when it is, or when it asked for none."""
        entry = self.admitted.get(key)
        if entry is None or entry.request.cpu_class is None:
            return None
        return (
            f"CPU class {entry.request.cpu_class} is not applied: the {self.name} policy does "
            "not read cpuclass annotations (only topology-aware does, for exclusive CPUs)"
        )

    def device_note(self, key: str) -> str | None:
        """How policy.preferCloseToDevices placed an admitted container: close to its
        devices, or why not; None when it did not apply."""
        entry = self.admitted.get(key)
        if entry is None or not self.config.preferCloseToDevices or not entry.exclusive:
            return None
        return self._device_notes.get(key) or described(
            self.topology, entry.request, entry.exclusive
        )

    def _note_devices(self, key: str, note: str | None) -> None:
        if note is None:
            self._device_notes.pop(key, None)
            return
        self._device_notes[key] = note
        if len(self._device_notes) > 2 * len(self.admitted) + 64:  # released keys' notes
            self._device_notes = {
                k: v for k, v in self._device_notes.items() if k in self.admitted or k == key
            }

    @property
    def taken(self) -> CPUSet:
        """CPUs held exclusively by some container."""
        return self._admitted.taken()

    # ----- `cpu.preserve` ----------------------------------------------------------------
    #
    # A preserved container keeps the CPUs kubelet asked for, cut to those it may share: never
    # CPUs exclusive to another container, never reserved CPUs it is not entitled to. Each
    # policy says which CPUs those are (`preserve_allowed`); the cut follows them as they
    # change, so a container that later takes exclusive CPUs moves preserved ones off them.

    def preserve_allowed(self, request: ContainerRequest) -> CPUSet:
        """The CPUs a preserved container may run on now (the policy's shared pool)."""
        raise NotImplementedError

    def kubelet_cpus(self, request: ContainerRequest) -> CPUSet:
        """The CPUs kubelet asked for (checked against the machine when decoded), or every
        available CPU when it set none (an empty cpuset inherits the parent's)."""
        return request.kubelet_cpus or self.available

    def preserved_cut(self, request: ContainerRequest) -> CPUSet:
        """Where a preserved container may be admitted: kubelet's CPUs cut to the allowed ones.
        PlacementError when nothing remains."""
        wanted = self.kubelet_cpus(request)
        allowed = self.preserve_allowed(request)
        cut = wanted & allowed
        if not cut:
            raise PlacementError(
                f"pod {request.namespace}/{request.pod_name} container {request.container}: "
                f"cpu.preserve keeps kubelet's CPUs {wanted or 'none'}, but none of them is "
                f"one it may share (the shared CPUs are {allowed or 'none'}; the others are "
                f"exclusive to other containers, reserved or isolated)"
            )
        return cut

    def preserved_cpus(self, request: ContainerRequest) -> CPUSet:
        """Where an admitted preserved container runs now: kubelet's CPUs cut to the allowed
        ones; all the allowed ones when others have since taken every CPU of that cut."""
        allowed = self.preserve_allowed(request)
        try:
            wanted = self.kubelet_cpus(request)
        except PlacementError:  # admitted before kubelet's values were checked
            wanted = self.available
        # Each policy keeps `allowed` non-empty while the container is admitted (static: the
        # shared pool keeps a CPU; topology-aware: the reserved CPUs once the root has no shared
        # CPU left; balloons: the reserved CPUs), so kubelet's own CPUs, which may be others'
        # exclusive CPUs, are only the last resort of an empty cpuset.
        return wanted & allowed or allowed or wanted

    def to_state(self) -> dict[str, Any]:
        return {**self.state_header(), "admitted": [a.to_dict() for a in self.admitted.values()]}

    def state_header(self) -> dict[str, Any]:
        """The saved state without the admitted containers: what a journal record carries
        whole (small: the policy's name, and what a policy keeps besides its decisions)."""
        return {"policy": self.name}

    def restore(self, state: Mapping[str, Any]) -> list[str]:
        """Re-admits a saved state's containers in their order, keeping their CPUs.

        Returns messages for entries that no longer fit (reconfigured machine or policy).
        """
        problems = []
        for data in state.get("admitted", []):
            entry = Admitted.from_dict(data)
            try:
                self.admit(entry.request, keep=entry.exclusive or None)
            except Exception as exc:  # reported, never fatal at start-up
                problems.append(
                    f"{entry.request.namespace}/{entry.request.pod_name}/"
                    f"{entry.request.container}: {exc}"
                )
        return problems
