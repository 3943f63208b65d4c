"""What the node has, as plain data: the bounds a container's request is checked against."""

from __future__ import annotations

from dataclasses import dataclass

from enforcer.topology import CPUSet, Topology


@dataclass(frozen=True)
class Machine:
    """The node's online CPUs, memory nodes and memory: nothing above them is believed."""

    cpus: CPUSet  # online CPUs
    mems: CPUSet  # memory nodes a cpuset may name
    memory_bytes: int = 0  # all memory; 0 when the topology does not know

    @classmethod
    def of(cls, topology: Topology) -> Machine:
        nodes = topology.nodes.values()
        return cls(
            cpus=topology.online,
            mems=CPUSet(n.id for n in nodes if n.memory_bytes or n.cpus),
            memory_bytes=sum(n.memory_bytes for n in nodes),
        )

    @property
    def cpu_milli(self) -> int:
        return len(self.cpus) * 1000
