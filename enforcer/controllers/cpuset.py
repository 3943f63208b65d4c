"""The cpuset controller: checks the CPU sets of the configuration, and reads back what the
kernel has for a container.

The runtime writes a container's cpuset (in the OCI spec at creation, by a container update
after), so this controller applies nothing itself: the engine hands the pinning to the
transport, and this controller verifies that it took. A difference is repaired through the
runtime (`Difference.by_runtime`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Protocol

from enforcer.controllers.base import (
    Difference,
    Findings,
    Outcome,
    PerContainer,
    Result,
    Roots,
    Target,
)
from enforcer.controllers.cgroups import cgroup_path, cgroup_version
from enforcer.decode import ContainerRequest
from enforcer.policy import make_policy
from enforcer.sysfs import read_topology
from enforcer.topology import CPUSet, Topology, TopologyError
from resource_contract.config import Config, ConfigError

NAME = "cpuset"

# The policy's keys the CPU-set check against a machine reads.
CPU_SET_KEYS = ("policy.reservedCPUs", "policy.availableCPUs")


class CpusetReader(Protocol):
    def read(self, cgroup_parent: str, container_id: str) -> tuple[str, str] | None:
        """The cpuset and memory nodes (cpus, mems) the kernel has for the container; None
        when its cgroup is gone."""
        ...


class CgroupCpusets:
    """Reads a container's cpuset files from the cgroup filesystem."""

    def __init__(self, cgroupfs_root: str = "/sys/fs/cgroup") -> None:
        self.root = cgroupfs_root

    def read(self, cgroup_parent: str, container_id: str) -> tuple[str, str] | None:
        """The container's cpuset.cpus and cpuset.mems; None when its cgroup is gone."""
        v2 = cgroup_version(self.root) == 2
        folder = cgroup_path(None if v2 else "cpuset", cgroup_parent, container_id, self.root)
        # v2 shows the CPUs in effect (cpuset.cpus is empty when inherited); v1's cpuset.cpus
        # is always set, to the parent's when nobody narrowed it.
        names = (
            ("cpuset.cpus.effective", "cpuset.mems.effective")
            if v2
            else (
                "cpuset.cpus",
                "cpuset.mems",
            )
        )
        try:
            cpus, mems = (_read(os.path.join(folder, n)) for n in names)
        except FileNotFoundError:
            return None
        return cpus, mems


class CpusetController(PerContainer):
    name = NAME

    def __init__(
        self,
        reader: CpusetReader | None,
        *,
        topology: Topology | None = None,
        sysfs_root: str | None = None,
    ) -> None:
        self.reader = reader
        self.topology = topology
        self.sysfs_root = sysfs_root

    @classmethod
    def for_node(
        cls,
        roots: Roots,
        topology: Topology | None = None,
        reader_over: Callable[[CpusetReader], CpusetReader] | None = None,
    ) -> CpusetController:
        """`reader_over`: the transport's reader over the kernel's (NRI: one that does not
        read a container whose update the runtime has not applied yet)."""
        reader: CpusetReader | None = None
        if roots.cgroupfs is not None:
            reader = CgroupCpusets(roots.cgroupfs)
            if reader_over is not None:
                reader = reader_over(reader)
        return cls(reader, topology=topology, sysfs_root=roots.sysfs)

    # -- configuration ---------------------------------------------------------------------

    @staticmethod
    def syntax(config: Config) -> list[str]:
        return []  # the CPU-set syntax is the contract schema's (policy.*CPUs)

    def check(self, config: Config, *, left_out: frozenset[str] = frozenset()) -> Findings:
        found = Findings()
        if self.topology is None and self.sysfs_root is None:
            found.notes.append(
                "skipped: the CPU sets (policy.reservedCPUs, policy.availableCPUs) against a "
                "machine's CPUs: give --sysfs-root DIR (/sys on the node itself)"
            )
            return found
        where = self.sysfs_root or "this machine"
        unchecked = [key for key in CPU_SET_KEYS if key in left_out or "policy" in left_out]
        if unchecked:
            found.notes.append(
                f"{', '.join(unchecked)}: not checked against {where} until the problems "
                "above are fixed"
            )
        try:
            self.validate(config)
        except ConfigError as exc:
            found.problems.extend(exc.problems)
        except TopologyError as exc:
            found.problems.append(f"--sysfs-root: {exc}")
        return found

    def validate(self, config: Config) -> None:
        topology = self.topology
        if topology is None:
            if self.sysfs_root is None:
                return
            topology = read_topology(self.sysfs_root)
        # The policy as it would start: its CPU sets, and the balloons policy's minBalloons.
        make_policy(topology, config.policy)

    def configure(self, config: Config) -> list[str]:
        # The CPU sets are the policy's to keep: the engine makes its policy from them.
        self.validate(config)
        return []

    # -- containers ------------------------------------------------------------------------

    def admit(self, request: ContainerRequest) -> ContainerRequest:
        return request  # the policy decides the CPUs; the runtime creates it on them

    def _written_by_runtime(self) -> Outcome:
        return Outcome(self.name, Result.SKIPPED, detail="the runtime writes the cpuset")

    def start(self, target: Target) -> Outcome:
        return self._written_by_runtime()

    def update(self, target: Target) -> Outcome:
        return self._written_by_runtime()

    def repin(self, target: Target) -> Outcome:
        return self._written_by_runtime()

    def stop(self, target: Target) -> Outcome:
        return Outcome(self.name, Result.SKIPPED, detail="the runtime removes the cgroup")

    def read(self, target: Target) -> tuple[str, str] | None:
        if self.reader is None:
            return None
        return self.reader.read(target.cgroup_parent, target.container_id)

    def verify(self, target: Target) -> Difference | None:
        seen = self.read(target)
        if seen is None:
            return None  # its cgroup is gone: the container ended; a listing releases it
        cpus, mems = seen
        if same_pinning(cpus, mems, target.cpus, target.mems):
            return None
        return Difference(
            self.name,
            f"has cpus={cpus} mems={mems}, decided cpus={target.cpus} mems={target.mems}",
            by_runtime=True,
            seen=(cpus, mems),
        )


def same_pinning(cpus: str, mems: str, wanted_cpus: str, wanted_mems: str) -> bool:
    """Whether the kernel's values are the decided ones (memory nodes compared only where
    both are known)."""
    return _cpuset(cpus) == _cpuset(wanted_cpus) and (
        not mems or not wanted_mems or _cpuset(mems) == _cpuset(wanted_mems)
    )


def _cpuset(text: str) -> CPUSet:
    try:
        return CPUSet.parse(text)
    except ValueError:
        return CPUSet()


def _read(path: str) -> str:
    with open(path) as f:
        return f.read().strip()
