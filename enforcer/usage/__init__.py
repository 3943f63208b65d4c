"""What the node's CPUs and memory are used for, by pool and by NUMA node, and the
NodeResourceTopology object built from it. Pure: policy state and topology in, plain data out."""

from enforcer.usage.accounting import USES, CpuUse, NodeUsage, PoolUsage, Usage, measure
from enforcer.usage.nrt import (
    NRT_API_VERSION,
    NRT_GROUP,
    NRT_KIND,
    NRT_PLURAL,
    NRT_VERSION,
    Alignment,
    alignment,
    node_resource_topology,
)

__all__ = [
    "NRT_API_VERSION",
    "NRT_GROUP",
    "NRT_KIND",
    "NRT_PLURAL",
    "NRT_VERSION",
    "USES",
    "Alignment",
    "CpuUse",
    "NodeUsage",
    "PoolUsage",
    "Usage",
    "alignment",
    "measure",
    "node_resource_topology",
]
