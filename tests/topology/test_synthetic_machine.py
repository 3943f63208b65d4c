"""The benchmark's generated 768-CPU server reads back as the machine it describes."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: bench/

from bench.synthetic import write_sysfs
from enforcer.sysfs import read_topology
from enforcer.topology import CPUSet


def test_two_sockets_of_192_cores_with_two_threads(tmp_path: Path) -> None:
    topology = read_topology(write_sysfs(tmp_path))
    assert len(topology.cpus) == 768 and len(topology.cores()) == 384
    assert sorted(topology.nodes) == [0, 1]
    assert topology.nodes[0].cpus == CPUSet(list(range(0, 192)) + list(range(384, 576)))
    assert topology.nodes[0].memory_bytes == 768 << 30
    assert topology.nodes[0].distances == {0: 10, 1: 32}
    # Linux's numbering: thread 0 of every core first, then the siblings.
    assert topology.siblings(5) == CPUSet.of(5, 389)
    l3s = topology.units("l3")
    assert len(l3s) == 24 and all(len(cpus) == 32 for cpus in l3s.values())
    assert {topology.cpus[c].socket for c in l3s[next(iter(l3s))]} == {0}
