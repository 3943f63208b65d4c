"""Hardware topology: CPU sets, the topology model and its sysfs reader."""

from enforcer.topology.cpuset import CPUSet
from enforcer.topology.model import CPUInfo, NumaNode, Topology, TopologyError
from enforcer.topology.sysfs import read_topology

__all__ = ["CPUInfo", "CPUSet", "NumaNode", "Topology", "TopologyError", "read_topology"]
