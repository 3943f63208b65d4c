"""`resource-enforcer plan` with the topology-aware policy on the real server snapshots, checked
against answers worked out by hand.

The `server` snapshot: 2 sockets, 4 NUMA nodes (sub-NUMA clustering), 112 CPUs. Node n holds
the CPUs c with c % 4 == n; CPU c and c+56 are the two threads of a core. Isolated: 4-7 and
60-63, i.e. one core per node ({4,60} in node0, {5,61} node1, {6,62} node2, {7,63} node3).
Memory-only (PMEM) node 4 is attached to node0, node 5 to node2. Pools, in order:
root, socket0, socket0/node0, socket0/node2, socket1, socket1/node1, socket1/node3.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from enforcer.commands.plan import plan
from enforcer.configuration import parse_config
from enforcer.topology import CPUSet, Topology

PODS = """
apiVersion: v1
kind: Pod
metadata: {name: kube-proxy-x7k2p, namespace: kube-system}
spec:
  containers:
  - name: kube-proxy
    image: registry.k8s.io/kube-proxy:v1.30.0
    resources: {requests: {cpu: 100m, memory: 128Mi}}
---
apiVersion: v1
kind: Pod
metadata: {name: pinger, namespace: prod}
spec:
  containers:
  - name: pinger
    image: busybox
    resources: {limits: {cpu: "1", memory: 1Gi}}
---
apiVersion: v1
kind: Pod
metadata: {name: cache, namespace: prod}
spec:
  containers:
  - name: redis
    image: redis
    resources: {limits: {cpu: "2", memory: 2Gi}}
---
apiVersion: v1
kind: Pod
metadata: {name: api, namespace: prod}
spec:
  containers:
  - name: api
    image: api
    resources: {limits: {cpu: "4", memory: 4Gi}}
---
apiVersion: v1
kind: Pod
metadata: {name: db, namespace: prod}
spec:
  containers:
  - name: postgres
    image: postgres
    resources: {limits: {cpu: "16", memory: 16Gi}}
---
apiVersion: v1
kind: Pod
metadata: {name: encoder, namespace: prod}
spec:
  containers:
  - name: ffmpeg
    image: ffmpeg
    resources: {limits: {cpu: 2500m, memory: 2Gi}}
---
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: prod}
spec:
  initContainers:
  - name: migrate
    image: web
    resources: {requests: {cpu: 100m}}
  containers:
  - name: app
    image: web
    resources: {requests: {cpu: 500m, memory: 512Mi}, limits: {cpu: "1", memory: 1Gi}}
  - name: log-shipper
    image: fluent-bit
    resources: {requests: {cpu: 100m, memory: 128Mi}}
---
apiVersion: v1
kind: Pod
metadata: {name: batch, namespace: jobs}
spec:
  containers:
  - name: worker
    image: busybox
---
apiVersion: v1
kind: Pod
metadata: {name: node-exporter, namespace: monitoring}
spec:
  containers:
  - name: exporter
    image: node-exporter
    resources: {limits: {cpu: "1", memory: 256Mi}}
---
apiVersion: v1
kind: Pod
metadata: {name: trainer, namespace: ml}
spec:
  containers:
  - name: train
    image: trainer
    resources: {limits: {cpu: "80", memory: 64Gi}}
"""

SERVER_CONFIG = {
    "policy": {
        "name": "topology-aware",
        "reservedCPUs": "0,56",  # core 0, in node0
        "reservedNamespaces": ["kube-system", "monitoring"],
    }
}


def node(n: int) -> CPUSet:
    return CPUSet(range(n, 112, 4))


RESERVED = CPUSet.of(0, 56)
ISOLATED = CPUSet.parse("4-7,60-63")
# node0 minus the reserved core and its isolated core: 24 CPUs; node2 minus its isolated core: 26.
NODE0_USABLE = node(0) - RESERVED - ISOLATED
NODE2_USABLE = node(2) - ISOLATED

# (namespace/pod/container, cpus, mems, exclusive, pool), in file order. Worked out by hand:
SERVER_EXPECTED = [
    # kube-system is a reserved namespace: the reserved core; its memory is node0's plus the
    # PMEM node 4 attached to node0.
    ("kube-system/kube-proxy-x7k2p/kube-proxy", RESERVED, "0,4", "", "reserved"),
    # Guaranteed 1 CPU prefers an isolated CPU (preferIsolatedCPUs defaults to true): all four
    # nodes have two free, nothing is placed yet, so the first pool in order, node0, and its
    # lowest isolated CPU.
    ("prod/pinger/pinger", CPUSet.of(4), "0,4", "4", "socket0/node0"),
    # 2 CPUs: every node can give a whole core; the least loaded by free CPUs are node2, node1
    # and node3 (26 each; node0 has 24), then by free memory node2 wins (it has PMEM node 5).
    # Its lowest idle core is {2,58}.
    ("prod/cache/redis", CPUSet.of(2, 58), "2,5", "2,58", "socket0/node2"),
    # 4 CPUs: node1 and node3 have 26 free, the others 24; node1 has 5 MiB more memory than
    # node3 (32249 vs 32244 MiB). Two lowest idle cores: {1,57} ({5,61} is isolated), {9,65}.
    ("prod/api/api", CPUSet.of(1, 9, 57, 65), "1", "1,9,57,65", "socket1/node1"),
    # 16 CPUs: node3 has the most free (26, others 24, 24, 22): its 8 lowest idle cores,
    # skipping the isolated {7,63}.
    (
        "prod/db/postgres",
        CPUSet.parse("3,11,15,19,23,27,31,35,59,67,71,75,79,83,87,91"),
        "3",
        "3,11,15,19,23,27,31,35,59,67,71,75,79,83,87,91",
        "socket1/node3",
    ),
    # 2500m: 2 exclusive CPUs + 500m shared in one pool. node0 and node2 both have 24 free
    # and one container; node0 has more free memory (157566 vs 157177 MiB after the 1 and
    # 2 GiB already charged). Exclusive: its lowest idle core {8,64}; the shared part: the rest
    # of node0's usable CPUs, so cpus = all 24 usable CPUs of node0.
    ("prod/encoder/ffmpeg", NODE0_USABLE, "0,4", "8,64", "socket0/node0"),
    # Burstable 100m init container, then 500m and 100m: shared, the node with the most free
    # shared capacity: node2 (24 CPUs - 0m granted) over node0 (22 - 500m), node1 (22) and
    # node3 (10). The sidecar follows its pod; the init container ran there and was released.
    ("prod/web/migrate", NODE2_USABLE - CPUSet.of(2, 58), "2,5", "", "socket0/node2"),
    ("prod/web/app", NODE2_USABLE - CPUSet.of(2, 58), "2,5", "", "socket0/node2"),
    ("prod/web/log-shipper", NODE2_USABLE - CPUSet.of(2, 58), "2,5", "", "socket0/node2"),
    # BestEffort: node2 still has the most free shared capacity (24000m - 600m = 23400m).
    ("jobs/batch/worker", NODE2_USABLE - CPUSet.of(2, 58), "2,5", "", "socket0/node2"),
    # monitoring is configured as a reserved namespace too: reserved, not exclusive.
    ("monitoring/node-exporter/exporter", RESERVED, "0,4", "", "reserved"),
]
# 80 CPUs no longer fit: 102 usable CPUs (112 - 2 reserved - 8 isolated) minus 24 held
# exclusively leaves 78 shared; of those the shared containers need 2 (1100m granted).
TRAINER_ERROR = (
    "pod ml/trainer container train: asked for 80 exclusive CPUs and 64Gi memory; no pool has "
    "room: the best, root, has 76 CPUs free for exclusive use, 76900m shared CPU and 346.8Gi "
    "memory free"
)


def pods() -> list[dict]:
    return list(yaml.safe_load_all(PODS))


def test_plan_on_server_matches_the_hand_worked_answer(
    topologies: dict[str, Topology],
) -> None:
    policy, rows = plan(parse_config(SERVER_CONFIG), topologies["server"], pods())
    placed = [r for r in rows if r["error"] is None]
    got = [
        (
            f"{r['namespace']}/{r['pod']}/{r['container']}",
            CPUSet.parse(r["cpus"]),
            r["mems"],
            r["exclusiveCPUs"],
            r["pool"],
        )
        for r in placed
    ]
    assert got == SERVER_EXPECTED
    for r in placed:  # the shared part is what is not exclusive
        assert CPUSet.parse(r["sharedCPUs"]) == CPUSet.parse(r["cpus"]) - CPUSet.parse(
            r["exclusiveCPUs"]
        )
    [refused] = [r for r in rows if r["error"] is not None]
    assert (refused["pod"], refused["error"]) == ("trainer", TRAINER_ERROR)
    assert refused["cpus"] is None
    # Refused, yet its QoS class is known (from the pod spec), and the pool that came closest
    # is the one the message names.
    assert (refused["qos"], refused["pool"], refused["balloon"]) == ("Guaranteed", "root", None)
    # What the pool view says afterwards.
    views = {v.name: v for v in policy.pools()}
    assert len(views["socket1/node3"].exclusive) == 16
    assert views["socket0/node2"].shared_milli == 600  # app + log-shipper (migrate is gone)
    assert views["root"].shared_milli == 1100


# Which containers cannot be placed, per snapshot, with reservedCPUs: 2 (one whole core):
# - 4-socket (144 CPUs): everything fits; the 80-CPU trainer spans sockets from the root.
# - server, sample2 (112 CPUs, 8 isolated): 102 usable - 24 exclusive = 78 < 80: trainer.
# - 2-socket-4-node-40-core (80): 78 usable - 25 exclusive (no isolated CPU, so the 1-CPU pod
#   takes an ordinary one) = 53 < 80: trainer.
# - desktop (20) and sample1 (16): 1 + 2 + 4 = 7 exclusive leaves 11 and 7 of 18 and 14
#   usable, minus the shared CPU the machine keeps: no room for db's 16; trainer neither.
REFUSED = {
    "4-socket-server-nosnc": [],
    "server": ["trainer"],
    "sample2": ["trainer"],
    "2-socket-4-node-40-core": ["trainer"],
    "desktop": ["db", "trainer"],
    "sample1": ["db", "trainer"],
}


@pytest.mark.parametrize("snapshot", sorted(REFUSED))
def test_plan_answers_on_every_snapshot(topologies: dict[str, Topology], snapshot: str) -> None:
    topology = topologies[snapshot]
    config = parse_config(
        {"policy": {**SERVER_CONFIG["policy"], "reservedCPUs": 2}}  # type: ignore[dict-item]
    )
    policy, rows = plan(config, topology, pods())
    assert len(rows) == 12
    assert [r["pod"] for r in rows if r["error"]] == REFUSED[snapshot]
    held: set[int] = set()
    for r in rows:
        if r["error"]:
            assert r["error"].startswith(f"pod {r['namespace']}/{r['pod']} container ")
            continue
        cpus, exclusive = CPUSet.parse(r["cpus"]), CPUSet.parse(r["exclusiveCPUs"])
        assert cpus and exclusive <= cpus
        assert r["mems"] == str(topology.memory_nodes_of_cpus(cpus))
        if r["container"] != "migrate":  # released before the others came
            assert not exclusive & held
            held |= exclusive
        if r["namespace"] in ("kube-system", "monitoring"):
            assert (r["pool"], cpus) == ("reserved", policy.reserved)
    db = next(r for r in rows if r["pod"] == "db")
    if not db["error"]:  # 16 CPUs fit in one NUMA node of every machine that can hold them
        assert len(topology.nodes_of_cpus(CPUSet.parse(db["exclusiveCPUs"]))) == 1
    encoder = next(r for r in rows if r["pod"] == "encoder")
    assert len(CPUSet.parse(encoder["exclusiveCPUs"])) == 2 and encoder["sharedCPUs"]


def test_plan_through_the_console_script(
    snapshot_roots: dict[str, Path], topologies: dict[str, Topology], tmp_path: Path
) -> None:
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(SERVER_CONFIG))
    (tmp_path / "pods.yaml").write_text(PODS)
    script = Path(sys.executable).parent / "resource-enforcer"
    args = [
        str(script),
        "plan",
        "--config",
        str(tmp_path / "config.yaml"),
        "--sysfs-root",
        str(snapshot_roots["server"]),
        "--pods",
        str(tmp_path / "pods.yaml"),
    ]
    # Exit 2: the trainer could not be placed (a CI job gates a rollout on it).
    as_json = subprocess.run([*args, "--format", "json"], capture_output=True, text=True)
    assert as_json.returncode == 2, as_json.stderr
    _, rows = plan(parse_config(SERVER_CONFIG), topologies["server"], pods())
    assert json.loads(as_json.stdout) == rows

    table = subprocess.run([*args, "--format", "table"], capture_output=True, text=True)
    assert table.returncode == 2, table.stderr
    lines = table.stdout.splitlines()
    assert f"NOT PLACED ml/trainer/train: {TRAINER_ERROR}" in lines
    # The pool tree, children indented under their parents, with the counts worked out above.
    pools = {
        line.split()[0]: line.split()
        for line in lines
        if line.startswith(("root", "  ")) and len(line.split()) == 10
    }
    assert list(pools) == [
        "root",
        "socket0",
        "socket0/node0",
        "socket0/node2",
        "socket1",
        "socket1/node1",
        "socket1/node3",
    ]
    # POOL CPUS SHARED EXCLUSIVE FREE SHARED-REQ CONTAINERS MEMS ...
    assert pools["socket1/node3"][1:8] == ["28", "10", "16", "12", "0m", "1", "3"]
    assert pools["socket0/node0"][1:8] == ["28", "22", "3", "22", "500m", "2", "0,4"]
    assert any(line.strip().startswith("core 0: cpu0=reserved  cpu56=reserved") for line in lines)


def test_init_containers_give_their_cpus_back_before_the_next_container() -> None:
    # 4 CPUs, CPU 0 reserved: a 2-CPU init container and a 2-CPU app container both fit,
    # one after the other, as they run.
    from enforcer.commands.plan import plan
    from enforcer.configuration import parse_config
    from enforcer.topology import CPUSet, Topology

    machine = Topology.synthetic(sockets=1, cores_per_node=4, threads_per_core=1)
    g2 = {"limits": {"cpu": "2", "memory": "64Mi"}}
    pod = {
        "kind": "Pod",
        "metadata": {"name": "staged", "namespace": "prod"},
        "spec": {
            "initContainers": [{"name": "setup", "image": "busybox", "resources": g2}],
            "containers": [{"name": "app", "image": "busybox", "resources": g2}],
        },
    }
    _, rows = plan(
        parse_config({"policy": {"name": "static", "reservedCPUs": "0"}}), machine, [pod]
    )
    assert [r["error"] for r in rows] == [None, None]
    assert [len(CPUSet.parse(r["exclusiveCPUs"])) for r in rows] == [2, 2]


def test_plan_shows_a_forbidden_preference_and_the_preserved_cut() -> None:
    # 4 CPUs, CPU 0 reserved, the default preferenceAccess (cpu.preserve: kube-system only).
    machine = Topology.synthetic(sockets=1, cores_per_node=4, threads_per_core=1)
    preserve = {"cpu.preserve.resource-enforcer.dev/pod": "true"}

    def pod(name: str, namespace: str, resources: dict, annotations: dict) -> dict:
        return {
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
            "spec": {"containers": [{"name": "app", "image": "busybox", "resources": resources}]},
        }

    g1 = {"limits": {"cpu": "1", "memory": "64Mi"}}
    pods = [
        pod("tenant", "prod", {}, preserve),
        pod("pinned", "prod", g1, {}),
        pod("agent", "kube-system", {}, preserve),
    ]
    _, rows = plan(parse_config({"policy": {"name": "static", "reservedCPUs": "0"}}), machine, pods)
    tenant, pinned, agent = rows
    assert tenant["cpus"] is None and "cpu.preserve.resource-enforcer.dev/pod" in tenant["error"]
    assert 'namespace "prod"' in tenant["error"] and "kube-system" in tenant["error"]
    assert pinned["error"] is None and agent["error"] is None
    assert agent["pool"] == "none" and agent["exclusiveCPUs"] == ""
    assert CPUSet.parse(agent["cpus"]) == machine.online - CPUSet.parse(pinned["exclusiveCPUs"])
