"""The topology-aware CPU allocator shared by the static and topology-aware policies."""

from enforcer.cpuallocator.allocator import NotEnoughCPUs, allocate_cpus, release_cpus
from enforcer.cpuallocator.options import (
    NO_OPTIONS,
    CPUOptions,
    SMTAlignmentError,
    check_request,
    cpus_per_core,
    take_cpus,
    usable,
    whole_cores,
)

__all__ = [
    "NO_OPTIONS",
    "CPUOptions",
    "NotEnoughCPUs",
    "SMTAlignmentError",
    "allocate_cpus",
    "check_request",
    "cpus_per_core",
    "release_cpus",
    "take_cpus",
    "usable",
    "whole_cores",
]
