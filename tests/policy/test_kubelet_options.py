"""kubelet's CPU manager options (issue 26, item 1), each checked on the recorded servers against
what kubelet's documentation says it guarantees, under the static and topology-aware policies,
through `plan` and through the policy API.

Snapshots: `server` (2 sockets, 4 NUMA nodes, 112 CPUs, CPU c and c+56 share a core, one L3 per
socket spanning two nodes); `2-socket-4-node-40-core` (80 CPUs, 20 per node, nodes 0-1 in
socket 0, CPU c and c+40 share a core).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml

from enforcer.commands.plan import plan
from enforcer.configuration import parse_config
from enforcer.decode import ContainerRequest, Preferences
from enforcer.policy import PlacementError, Policy, make_policy
from enforcer.refusal import Reason
from enforcer.topology import CPUSet, Topology
from enforcer.topology.model import Level
from resource_contract.config import ConfigError

POLICIES = ["static", "topology-aware"]
SPREAD = "2-socket-4-node-40-core"


def config(policy: str, **options: Any) -> Any:
    return parse_config({"policy": {"name": policy, "reservedCPUs": "0,40", **options}})


def pods(*specs: tuple[str, str, str]) -> list[dict[str, Any]]:
    """(name, namespace, cpu) -> a pod with one container `c`: Guaranteed for an integer or
    millicore cpu, BestEffort for ''."""
    docs = []
    for name, namespace, cpu in specs:
        resources = {"limits": {"cpu": cpu, "memory": "64Mi"}} if cpu else {}
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"containers": [{"name": "c", "image": "x", "resources": resources}]},
            }
        )
    return docs


def run_plan(policy: str, topology: Topology, docs: list[dict], **options: Any) -> dict:
    _, rows = plan(config(policy, **options), topology, docs)
    return {r["pod"]: r for r in rows}


def guaranteed(name: str, cpus: int, namespace: str = "prod") -> ContainerRequest:
    return ContainerRequest(
        pod_uid=f"uid-{name}",
        pod_name=name,
        namespace=namespace,
        container="c",
        qos="Guaranteed",
        cpu_request_milli=cpus * 1000,
        cpu_limit_milli=cpus * 1000,
        preferences=Preferences(isolated=False),
    )


def whole_cores(topology: Topology, cpus: CPUSet) -> bool:
    return all(core <= cpus or not core & cpus for core in topology.cores())


def cores_touched(topology: Topology, cpus: CPUSet) -> list[CPUSet]:
    return [core for core in topology.cores() if core & cpus]


def per_node(topology: Topology, cpus: Iterable[int]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for cpu in cpus:
        node = topology.cpus[cpu].node
        counts[node] = counts.get(node, 0) + 1
    return counts


# ----- full-pcpus-only ---------------------------------------------------------------------


@pytest.mark.parametrize("policy", POLICIES)
def test_full_pcpus_only_whole_cores_and_kubelets_smt_alignment_error(
    topologies: dict[str, Topology], policy: str
) -> None:
    """kubelet: "the CPU Manager will admit a pod only if the CPU request can be satisfied by
    allocating full physical cores"; an odd count on an SMT machine fails with
    SMTAlignmentError."""
    server = topologies["server"]
    docs = pods(("a", "prod", "2"), ("b", "prod", "3"), ("c", "prod", "4"), ("d", "prod", "1"))
    rows = run_plan(policy, server, docs, fullPCPUsOnly=True)
    for name in ("a", "c"):
        got = CPUSet.parse(rows[name]["exclusiveCPUs"])
        assert rows[name]["error"] is None and whole_cores(server, got), rows[name]
    assert not CPUSet.parse(rows["a"]["exclusiveCPUs"]) & CPUSet.parse(rows["c"]["exclusiveCPUs"])
    for name in ("b", "d"):
        assert rows[name]["cpus"] is None
        assert "SMTAlignmentError" in rows[name]["error"]
        assert "fullPCPUsOnly" in rows[name]["error"] and "multiple of the 2" in rows[name]["error"]
    # Without the option the same 3-CPU pod is placed, on a split core.
    plain = run_plan(policy, server, docs)
    assert plain["b"]["error"] is None
    assert not whole_cores(server, CPUSet.parse(plain["b"]["exclusiveCPUs"]))


@pytest.mark.parametrize("policy", POLICIES)
def test_full_pcpus_only_never_uses_a_reserved_cpus_sibling(
    topologies: dict[str, Topology], policy: str
) -> None:
    """kubelet's reservedPhysicalCPUs: a reserved thread makes its whole core unavailable, so
    every exclusive set stays whole cores until none is left, then SMTAlignmentError."""
    server = topologies["server"]
    made = make_policy(server, config(policy, fullPCPUsOnly=True).policy)
    held = CPUSet()
    refusal = None
    for i in range(60):
        try:
            got = made.admit(guaranteed(f"p{i}", 2)).exclusive
        except PlacementError as exc:
            refusal = exc
            break
        assert whole_cores(server, got) and not got & held
        held |= got
    assert refusal is not None and refusal.reason is Reason.NO_ROOM
    assert "fullPCPUsOnly" in str(refusal)
    assert not held & CPUSet.parse("0,40,56,96")  # reserved 0 and 40, and their siblings
    with pytest.raises(PlacementError) as odd:
        made.admit(guaranteed("odd", 1))
    assert odd.value.reason is Reason.BAD_REQUEST and "SMTAlignmentError" in str(odd.value)


def test_full_pcpus_only_fractional_guaranteed_runs_shared_as_with_kubelet(
    topologies: dict[str, Topology],
) -> None:
    """kubelet gives exclusive CPUs to integer requests only; topology-aware's "mixed" split
    (3 exclusive + 500m) would break a core, so the container runs shared."""
    rows = run_plan("topology-aware", topologies["server"], pods(("m", "prod", "3500m")),
                    fullPCPUsOnly=True)  # fmt: skip
    assert rows["m"]["error"] is None and rows["m"]["exclusiveCPUs"] == ""
    assert rows["m"]["pool"] not in ("exclusive",) and rows["m"]["cpus"]


# ----- distribute-cpus-across-numa ---------------------------------------------------------


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("full", [False, True])
def test_distribute_across_numa_splits_evenly_over_the_fewest_nodes(
    topologies: dict[str, Topology], policy: str, full: bool
) -> None:
    """kubelet: "evenly distribute CPUs across NUMA nodes in cases where more than one NUMA
    node is required to satisfy the allocation" (in whole cores with full-pcpus-only)."""
    topology = topologies[SPREAD]
    docs = pods(("small", "prod", "10"), ("big", "prod", "30"))
    rows = run_plan(policy, topology, docs, distributeCPUsAcrossNUMA=True, fullPCPUsOnly=full)
    small = CPUSet.parse(rows["small"]["exclusiveCPUs"])
    assert len(per_node(topology, small)) == 1  # fits one node: not spread
    big = CPUSet.parse(rows["big"]["exclusiveCPUs"])
    counts = per_node(topology, big)
    assert len(big) == 30 and len(counts) == 2, counts  # 20 CPUs a node: two are needed
    assert max(counts.values()) - min(counts.values()) <= (2 if full else 0), counts
    assert len(topology.sockets_of_cpus(big)) == 1  # ours: the nodes of one socket first
    if full:
        assert whole_cores(topology, big)
    plain = run_plan(policy, topology, docs)
    spread = per_node(topology, CPUSet.parse(plain["big"]["exclusiveCPUs"]))
    assert max(spread.values()) - min(spread.values()) > 2  # packed without the option


# ----- distribute-cpus-across-cores --------------------------------------------------------


@pytest.mark.parametrize("policy", POLICIES)
def test_distribute_across_cores_one_thread_per_core(
    topologies: dict[str, Topology], policy: str
) -> None:
    """kubelet: "allocate virtual cores, sometimes called hardware threads, across different
    physical cores" while it can (a preference: it packs when the cores run out)."""
    server = topologies["server"]
    rows = run_plan(policy, server, pods(("a", "prod", "4"), ("b", "prod", "20")),
                    distributeCPUsAcrossCores=True)  # fmt: skip
    for name, count in (("a", 4), ("b", 20)):
        got = CPUSet.parse(rows[name]["exclusiveCPUs"])
        assert len(got) == count and len(cores_touched(server, got)) == count, rows[name]
    plain = run_plan(policy, server, pods(("a", "prod", "4")))
    assert len(cores_touched(server, CPUSet.parse(plain["a"]["exclusiveCPUs"]))) == 2


def test_distribute_across_cores_packs_when_cores_run_out(topologies: dict[str, Topology]) -> None:
    server = topologies["server"]
    made = make_policy(server, config("static", distributeCPUsAcrossCores=True).policy)
    got = made.admit(guaranteed("huge", 100)).exclusive
    # 110 CPUs free on 55 cores besides the reserved ones' (0 and 40 = cores {0,56}, {40,96}):
    # every core gives one thread before any gives its second.
    touched = cores_touched(server, got)
    assert len(got) == 100 and len(touched) >= 54


# ----- align-by-socket ---------------------------------------------------------------------


def fragment(made: Policy, topology: Topology) -> None:
    """Socket 0: one thread busy on 12 of its cores (28 CPUs free, 16 of them whole cores);
    socket 1: 8 whole cores busy (24 free). Held through `keep`, as a restart does."""
    s0, s1 = (topology.units("socket")[s] for s in (0, 1))
    cores0 = [c for c in topology.cores() if c <= s0 and not c & made.reserved]
    cores1 = [c for c in topology.cores() if c <= s1 and not c & made.reserved]
    for i, core in enumerate(cores0[:12]):
        made.admit(guaranteed(f"one{i}", 1), keep=CPUSet.of(min(core)))
    for i, core in enumerate(cores1[:8]):
        made.admit(guaranteed(f"two{i}", 2), keep=core)


def most_free(made: Policy, topology: Topology, level: Level) -> tuple[int, int]:
    """(the most, the second most) CPUs free for exclusive use in one unit of `level`."""
    free = made.available - made.reserved - made.taken
    if made.name == "topology-aware":
        free = free - topology.isolated
    sizes = sorted((len(cpus & free) for cpus in topology.units(level).values()), reverse=True)
    return sizes[0], sizes[1]


@pytest.mark.parametrize("policy", POLICIES)
def test_align_by_socket_stays_in_one_socket_when_one_can_hold_it(
    topologies: dict[str, Topology], policy: str
) -> None:
    """kubelet: "CPUs will be considered aligned at the socket boundary": an allocation one
    socket can hold comes from one socket, even where that means split cores."""
    topology = topologies[SPREAD]
    sockets = {}
    for align in (False, True):
        made = make_policy(topology, config(policy, alignBySocket=align).policy)
        fragment(made, topology)
        n, second = most_free(made, topology, "socket")
        assert n > second  # only socket 0 can hold it
        taken = made.admit(guaranteed("wide", n)).exclusive
        assert len(taken) == n
        sockets[align] = topology.sockets_of_cpus(taken)
    assert sockets[True] == {0}
    assert len(sockets[False]) == 2  # the allocator alone prefers whole cores


def test_align_by_socket_refused_where_kubelet_refuses_it(topologies: dict[str, Topology]) -> None:
    data = Topology.synthetic(sockets=2, cores_per_node=2).to_dict()
    for cpu in data["cpus"]:  # one NUMA node across both sockets
        cpu["node"] = 0
    data["nodes"] = [n for n in data["nodes"] if n["id"] == 0]
    data["nodes"][0]["cpus"] = str(CPUSet(c["id"] for c in data["cpus"]))
    data["nodes"][0]["distances"] = {"0": 10}
    machine = Topology.from_dict(data)
    options = {"name": "static", "reservedCPUs": 1, "alignBySocket": True}
    with pytest.raises(ConfigError) as err:
        make_policy(machine, parse_config({"policy": options}).policy)
    assert err.value.problems[0].startswith("policy.alignBySocket: this machine has more sockets")


# ----- strict-cpu-reservation --------------------------------------------------------------


@pytest.mark.parametrize("policy", POLICIES)
def test_strict_reservation_keeps_every_pod_outside_reserved_namespaces_off_reserved_cpus(
    topologies: dict[str, Topology], policy: str
) -> None:
    """kubelet: "prevents all the pods regardless of their Quality of Service class to run on
    reserved CPUs" (ours: pods of reservedNamespaces still may). Even when exclusive
    containers take every other CPU, the shared pool keeps one."""
    topology = topologies[SPREAD]
    reserved = CPUSet.parse("0,40")
    docs = pods(("be", "prod", ""), ("burst", "prod", "500m"), ("sys", "kube-system", ""),
                ("hog", "prod", "76"), ("more", "prod", "1"), ("last", "prod", "1"),
                ("late", "prod", ""))  # fmt: skip
    rows = run_plan(policy, topology, docs, strictCPUReservation=True)
    assert rows["last"]["error"] is not None  # the exclusive CPUs ran out ...
    for name in ("be", "burst", "late"):  # ... and the shared containers still have CPUs
        cpus = CPUSet.parse(rows[name]["cpus"])
        assert cpus and not cpus & reserved, rows[name]
    assert not CPUSet.parse(rows["hog"]["cpus"]) & reserved
    assert CPUSet.parse(rows["sys"]["cpus"]) & reserved
    if policy == "static":  # without the option, static's shared pool has the reserved CPUs
        plain = run_plan(policy, topology, docs)
        assert CPUSet.parse(plain["late"]["cpus"]) & reserved


def test_strict_reservation_refuses_prefer_reserved_outside_reserved_namespaces(
    topologies: dict[str, Topology],
) -> None:
    strict = config("topology-aware", strictCPUReservation=True).policy
    made = make_policy(topologies[SPREAD], strict)
    request = ContainerRequest(
        pod_uid="u",
        pod_name="p",
        namespace="prod",
        container="c",
        qos="BestEffort",
        preferences=Preferences(reserved=True),
    )
    with pytest.raises(PlacementError) as err:
        made.admit(request)
    assert err.value.reason is Reason.FORBIDDEN and "strictCPUReservation" in str(err.value)


# ----- prefer-align-cpus-by-uncorecache ----------------------------------------------------


@pytest.mark.parametrize("policy", POLICIES)
def test_prefer_uncore_cache_one_l3_when_one_has_room(
    topologies: dict[str, Topology], policy: str
) -> None:
    """kubelet: "allocate CPU resources for individual containers such that all CPUs
    assigned to a container share the same uncore cache block" where they fit; else as few
    uncore caches as possible."""
    server = topologies["server"]  # one L3 per socket, 56 CPUs each
    l3 = server.units("l3")
    found = {}
    for prefer in (False, True):
        made = make_policy(server, config(policy, preferAlignCPUsByUncoreCache=prefer).policy)
        fragment(made, server)
        n, second = most_free(made, server, "l3")
        assert n > second  # only one L3 can hold it
        taken = made.admit(guaranteed("wide", n)).exclusive
        found[prefer] = [k for k, cpus in l3.items() if cpus & taken]
    assert len(found[True]) == 1
    assert len(found[False]) == 2
    made = make_policy(server, config(policy, preferAlignCPUsByUncoreCache=True).policy)
    taken = made.admit(guaranteed("huge", 70)).exclusive  # more than one L3 holds
    assert len([k for k, cpus in l3.items() if cpus & taken]) == 2


# ----- check-config ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"fullPCPUsOnly": True, "distributeCPUsAcrossCores": True},
         "policy.distributeCPUsAcrossCores: cannot be used with policy.fullPCPUsOnly"),
        ({"distributeCPUsAcrossNUMA": True, "distributeCPUsAcrossCores": True},
         "policy.distributeCPUsAcrossCores: cannot be used with policy.distributeCPUsAcrossNUMA"),
        ({"preferAlignCPUsByUncoreCache": True, "distributeCPUsAcrossCores": True},
         "policy.distributeCPUsAcrossCores: cannot be used with policy.preferAlignCPUsByUncore"),
        ({"preferAlignCPUsByUncoreCache": True, "distributeCPUsAcrossNUMA": True},
         "policy.distributeCPUsAcrossNUMA: cannot be used with policy.preferAlignCPUsByUncore"),
    ],
)  # fmt: skip
def test_kubelets_refused_pairs_are_refused_by_key(options: dict, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        config("static", **options)
    assert any(p.startswith(message) for p in err.value.problems), err.value.problems


def test_balloons_refuse_the_options_by_key() -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(yaml.safe_load("""
policy: {name: balloons, reservedCPUs: 1, fullPCPUsOnly: true, strictCPUReservation: true}
"""))  # fmt: skip
    assert [p.split(":")[0] for p in err.value.problems] == [
        "policy.fullPCPUsOnly",
        "policy.strictCPUReservation",
    ]
    assert "static and topology-aware policies only, not by balloons" in err.value.problems[0]


def test_check_config_names_each_refused_option(tmp_path: Path, snapshot_roots: dict) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "policy: {name: topology-aware, fullPCPUsOnly: true, distributeCPUsAcrossCores: true,\n"
        "         alignBySocket: true}\nnodeResourceTopology: {enabled: true}\n"
    )
    run = subprocess.run(
        [sys.executable, "-m", "enforcer.cli", "check-config", str(path),
         "--sysfs-root", str(snapshot_roots[SPREAD])],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert run.returncode == 1
    out = run.stdout + run.stderr
    assert "policy.distributeCPUsAcrossCores: cannot be used with policy.fullPCPUsOnly" in out
    assert "policy.alignBySocket: cannot be used with nodeResourceTopology" in out
    path.write_text("policy: {name: static, reservedCPUs: 2, fullPCPUsOnly: true}\n")
    run = subprocess.run(
        [sys.executable, "-m", "enforcer.cli", "check-config", str(path),
         "--sysfs-root", str(snapshot_roots[SPREAD])],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.parametrize("policy", POLICIES)
def test_a_running_container_keeps_its_cpus_when_full_pcpus_only_is_turned_on(
    topologies: dict[str, Topology], policy: str
) -> None:
    """As a kubelet restart keeps its checkpoint: the saved state is restored as it was, new
    containers follow the option."""
    server = topologies["server"]
    before = make_policy(server, config(policy).policy)
    odd = before.admit(guaranteed("odd", 3)).exclusive
    after = make_policy(server, config(policy, fullPCPUsOnly=True).policy)
    assert after.restore(before.to_state()) == []
    assert after.placement("uid-odd/c").exclusive == odd
    with pytest.raises(PlacementError):
        after.admit(guaranteed("new", 3))


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize(
    ("option", "snapshot", "level"),
    [("alignBySocket", SPREAD, "socket"), ("preferAlignCPUsByUncoreCache", "server", "l3")],
)
def test_alignment_options_through_plan(
    topologies: dict[str, Topology], policy: str, option: str, snapshot: str, level: Level
) -> None:
    """The same guarantees as above, seen in `plan`: the fragmented machine is made with
    availableCPUs (one thread of 12 cores of socket 0 and 8 whole cores of socket 1 left out)."""
    topology = topologies[snapshot]
    s0, s1 = (topology.units("socket")[s] for s in (0, 1))
    reserved = CPUSet.parse("0,40")
    plain = reserved | topology.isolated
    cores0 = [c for c in topology.cores() if c <= s0 and not c & plain]
    cores1 = [c for c in topology.cores() if c <= s1 and not c & plain]
    left_out = CPUSet().union(*(CPUSet.of(max(c)) for c in cores0[:12]), *cores1[:8])
    available = str(topology.online - left_out)
    usable = topology.online - left_out - reserved
    if policy == "topology-aware":
        usable = usable - topology.isolated
    sizes = sorted((len(cpus & usable) for cpus in topology.units(level).values()), reverse=True)
    n = sizes[0]
    assert n > sizes[1]  # only one can hold it
    found = {}
    for on in (False, True):
        rows = run_plan(policy, topology, pods(("wide", "prod", str(n))),
                        availableCPUs=available, **{option: on})  # fmt: skip
        got = CPUSet.parse(rows["wide"]["exclusiveCPUs"])
        assert len(got) == n, rows["wide"]
        found[on] = {k for k, cpus in topology.units(level).items() if cpus & got}
    assert len(found[True]) == 1
    assert len(found[False]) == 2  # without the option: whole cores from both


@pytest.mark.parametrize("policy", POLICIES)
def test_strict_reservation_holds_for_preserved_containers(
    topologies: dict[str, Topology], policy: str
) -> None:
    """cpu.preserve keeps kubelet's CPUs cut to what the container may share: under
    strictCPUReservation never the reserved CPUs outside reservedNamespaces."""
    reserved = CPUSet.parse("0,40")
    made = make_policy(topologies[SPREAD], config(policy, strictCPUReservation=True).policy)
    for namespace, allowed in (("prod", False), ("kube-system", True)):
        request = ContainerRequest(
            pod_uid=f"u-{namespace}",
            pod_name="p",
            namespace=namespace,
            container="c",
            qos="BestEffort",
            preferences=Preferences(preserve=True, reserved=True),
        )
        cpus = made.admit(request).cpus
        assert cpus is not None and bool(cpus & reserved) is allowed, (namespace, cpus)
