"""Hardware topology: CPU sets and the topology model (read from sysfs by `enforcer.sysfs`)."""

from enforcer.topology.cpuset import CPUSet
from enforcer.topology.model import CPUInfo, NumaNode, Topology, TopologyError

__all__ = ["CPUInfo", "CPUSet", "NumaNode", "Topology", "TopologyError"]
