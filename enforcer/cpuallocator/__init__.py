"""The topology-aware CPU allocator shared by the static and topology-aware policies."""

from enforcer.cpuallocator.allocator import NotEnoughCPUs, allocate_cpus, release_cpus

__all__ = ["NotEnoughCPUs", "allocate_cpus", "release_cpus"]
