"""The machine read from its sysfs folder: its topology (``read_topology``), the file I/O kept
out of the pure ``enforcer.topology`` model."""

from enforcer.sysfs.topology import read_online_cpus, read_topology

__all__ = ["read_online_cpus", "read_topology"]
