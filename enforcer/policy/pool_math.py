"""Small pure helpers of the topology-aware policy: memory split over nodes, whole-core counts,
pool closeness, byte formatting."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from enforcer.topology import CPUSet, Topology

if TYPE_CHECKING:
    from enforcer.policy.pool_tree import Pool


def split_memory(topology: Topology, amount: int, nodes: Iterable[int]) -> dict[int, int]:
    """`amount` bytes over `nodes` in proportion to their size; exact, deterministic."""
    sizes = [(n, topology.nodes[n].memory_bytes) for n in sorted(nodes)]
    total = sum(size for _, size in sizes)
    if total <= 0 or amount <= 0:
        return {}
    shares = {n: amount * size // total for n, size in sizes}
    biggest = max(sizes, key=lambda s: (s[1], -s[0]))[0]
    shares[biggest] += amount - sum(shares.values())  # the rounding remainder
    return {n: a for n, a in shares.items() if a}


def whole_cores_count(cores: Sequence[CPUSet], free: CPUSet, n: int) -> int:
    """How many of n CPUs can come as whole idle cores out of `free`, biggest cores first."""
    total = 0
    for size in sorted(map(len, filter(free.issuperset, cores)), reverse=True):
        if total + size <= n:
            total += size
            if total == n:
                break
    return total


def closeness(a: Pool, b: Pool, pools: Sequence[Pool]) -> int:
    """How close two pools are: the depth of their lowest common ancestor, plus one when they
    are the same pool."""
    common = set(a.chain) & set(b.chain)
    depth = max(pools[i].depth for i in common)
    return depth + (1 if a.index == b.index else 0)


def format_bytes(amount: int) -> str:
    for unit, size in (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if amount >= size:
            value = amount / size
            return f"{value:.0f}{unit}" if value == int(value) else f"{value:.1f}{unit}"
    return f"{amount}B"
