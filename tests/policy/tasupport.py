"""Helpers of the topology-aware policy's tests: a synthetic machine, requests, policies.

The synthetic MACHINE below has 2 sockets x 2 NUMA nodes x 2 cores x 2 threads, numbered as
Linux does (first threads of all cores, then the second threads):

    socket0: node0 = cores {0,8} {1,9}      node1 = cores {2,10} {3,11}
    socket1: node2 = cores {4,12} {5,13}    node3 = cores {6,14} {7,15}

Every node has 16 GiB of memory.
"""

from __future__ import annotations

from enforcer.decode import ContainerRequest, Preferences
from enforcer.policy import TopologyAwarePolicy, make_policy
from enforcer.topology import CPUSet, Topology
from resource_contract.policy_config import PolicyConfig

MACHINE = Topology.synthetic(sockets=2, nodes_per_die=2, cores_per_node=2)
GiB = 1 << 30


def node(n: int) -> CPUSet:
    return MACHINE.cpus_of_node(n)


def req(
    name: str,
    milli: int = 0,
    qos: str = "Guaranteed",
    *,
    pod: str | None = None,
    namespace: str = "ns",
    memory: int = 0,
    **prefs: bool,
) -> ContainerRequest:
    pod = pod or name
    return ContainerRequest(
        pod_uid=f"uid-{pod}",
        pod_name=pod,
        namespace=namespace,
        container=name,
        qos=qos,  # type: ignore[arg-type]
        cpu_request_milli=milli,
        cpu_limit_milli=milli if qos == "Guaranteed" else 0,
        memory_request=memory,
        memory_limit=memory,
        preferences=Preferences(**prefs),
    )


def policy(topology: Topology = MACHINE, **config: object) -> TopologyAwarePolicy:
    made = make_policy(topology, PolicyConfig(name="topology-aware", **config))
    assert isinstance(made, TopologyAwarePolicy)
    return made
