"""policy.preferCloseToDevices (issue 26, item 5) on the recorded multi-NUMA servers, under the
static and topology-aware policies: a container given devices on NUMA node N gets its exclusive
CPUs and its memory on node N; nothing changes with the key off; a request that does not fit
there (or devices on a node the machine lacks) gets the normal placement and a reason.

Snapshots: `2-socket-4-node-40-core` (80 CPUs, 20 per node, two nodes per socket);
`4-socket-server-nosnc` (144 CPUs, one node per socket).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from enforcer.commands.plan import plan_command
from enforcer.configuration import parse_config
from enforcer.decode import ContainerRequest, Preferences
from enforcer.policy import make_policy
from enforcer.policy.model import Admitted
from enforcer.sysfs import read_topology
from enforcer.topology import CPUSet, Topology
from resource_contract.config import ConfigError

POLICIES = ["static", "topology-aware"]
SNAPSHOTS = ["2-socket-4-node-40-core", "4-socket-server-nosnc"]


def config(policy: str, **options: Any) -> Any:
    return parse_config({"policy": {"name": policy, "reservedCPUs": "0", **options}}).policy


def request(
    name: str, cpus: int, nodes: tuple[int, ...] = (), devices: int = 1
) -> ContainerRequest:
    return ContainerRequest(
        pod_uid=f"uid-{name}",
        pod_name=name,
        namespace="prod",
        container="c",
        qos="Guaranteed",
        cpu_request_milli=cpus * 1000,
        cpu_limit_milli=cpus * 1000,
        memory_request=64 << 20,
        memory_limit=64 << 20,
        preferences=Preferences(isolated=False),
        devices=tuple(f"example.com/fake-nic=nic-{i}" for i in range(devices)),
        device_nodes=nodes,
    )


def nodes_of(topology: Topology, cpus: CPUSet | None) -> set[int]:
    assert cpus
    return topology.nodes_of_cpus(cpus)


@pytest.mark.parametrize("snapshot", SNAPSHOTS)
@pytest.mark.parametrize("policy", POLICIES)
def test_cpus_and_memory_on_the_devices_node(
    topologies: dict[str, Topology], policy: str, snapshot: str
) -> None:
    topology = topologies[snapshot]
    made = make_policy(topology, config(policy, preferCloseToDevices=True))
    for node in (1, 2):
        placed = made.admit(request(f"nic{node}", 4, (node,)))
        assert nodes_of(topology, placed.cpus) == {node}
        assert placed.exclusive == placed.cpus
        assert placed.mems == topology.memory_nodes_of_cpus(topology.cpus_of_node(node))
        note = made.device_note(f"uid-nic{node}/c/0") or made.device_note(
            next(k for k in made.admitted if k.startswith(f"uid-nic{node}/"))
        )
        assert note is not None and f"NUMA node {node}" in note and "close to" in note


@pytest.mark.parametrize("policy", POLICIES)
def test_off_the_preference_places_as_before(topologies: dict[str, Topology], policy: str) -> None:
    topology = topologies["2-socket-4-node-40-core"]
    off = make_policy(topology, config(policy))
    plain = make_policy(topology, config(policy))
    with_devices = off.admit(request("a", 4, (1,)))
    without = plain.admit(request("a", 4))
    assert with_devices.cpus == without.cpus
    assert nodes_of(topology, with_devices.cpus) != {1}  # the normal placement is elsewhere
    assert all(off.device_note(k) is None for k in off.admitted)


@pytest.mark.parametrize("policy", POLICIES)
def test_too_big_for_the_node_gets_the_normal_placement_and_a_reason(
    topologies: dict[str, Topology], policy: str
) -> None:
    topology = topologies["2-socket-4-node-40-core"]  # 20 CPUs per node
    made = make_policy(topology, config(policy, preferCloseToDevices=True))
    plain = make_policy(topology, config(policy))
    placed = made.admit(request("big", 24, (1,)))
    assert placed.cpus == plain.admit(request("big", 24)).cpus
    key = next(iter(made.admitted))
    note = made.device_note(key)
    assert note is not None
    assert "NUMA node 1" in note and "24 asked" in note and "normal placement" in note


@pytest.mark.parametrize("policy", POLICIES)
def test_node_full_falls_back(topologies: dict[str, Topology], policy: str) -> None:
    topology = topologies["2-socket-4-node-40-core"]
    made = make_policy(topology, config(policy, preferCloseToDevices=True))
    made.admit(request("first", 16, (1,)))
    placed = made.admit(request("second", 8, (1,)))
    assert nodes_of(topology, placed.cpus) != {1}
    key = next(k for k in made.admitted if k.startswith("uid-second/"))
    assert "normal placement" in (made.device_note(key) or "")


@pytest.mark.parametrize("policy", POLICIES)
def test_devices_on_a_node_the_machine_lacks(topologies: dict[str, Topology], policy: str) -> None:
    topology = topologies["2-socket-4-node-40-core"]
    made = make_policy(topology, config(policy, preferCloseToDevices=True))
    plain = make_policy(topology, config(policy))
    placed = made.admit(request("far", 2, (7,)))
    assert placed.cpus == plain.admit(request("far", 2)).cpus
    note = made.device_note(next(iter(made.admitted))) or ""
    assert "NUMA node 7" in note and "does not have" in note and "normal placement" in note


@pytest.mark.parametrize("policy", POLICIES)
def test_devices_across_two_nodes(topologies: dict[str, Topology], policy: str) -> None:
    topology = topologies["2-socket-4-node-40-core"]
    made = make_policy(topology, config(policy, preferCloseToDevices=True))
    placed = made.admit(request("two", 4, (2, 3), devices=2))
    assert nodes_of(topology, placed.cpus) <= {2, 3}


def test_the_devices_survive_the_state_file(topologies: dict[str, Topology]) -> None:
    entry = Admitted(request("saved", 2, (1,)), "exclusive", CPUSet.parse("20-21"))
    back = Admitted.from_dict(entry.to_dict())
    assert back.request == entry.request
    damaged = entry.to_dict()
    damaged["request"] = {**damaged["request"], "device_nodes": ["one"]}
    with pytest.raises(ValueError, match="device_nodes"):
        Admitted.from_dict(damaged)


def test_shared_containers_are_left_alone(topologies: dict[str, Topology]) -> None:
    topology = topologies["2-socket-4-node-40-core"]
    made = make_policy(topology, config("static", preferCloseToDevices=True))
    shared = replace(request("s", 1, (1,)), cpu_request_milli=500, cpu_limit_milli=500)
    placed = made.admit(shared)
    assert placed.kind == "shared" and made.device_note(next(iter(made.admitted))) is None


@pytest.mark.parametrize("policy", ["balloons", "none"])
def test_refused_where_no_policy_reads_it(policy: str) -> None:
    with pytest.raises(ConfigError, match=r"policy\.preferCloseToDevices"):
        parse_config({"policy": {"name": policy, "preferCloseToDevices": True}})


def nic_pod(name: str, cpu: str) -> dict[str, Any]:
    resources = {"limits": {"cpu": cpu, "memory": "64Mi"}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "prod"},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": resources}]},
    }


@pytest.mark.parametrize("policy", POLICIES)
def test_plan_reads_the_devices_file(
    tmp_path: Path,
    snapshot_roots: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
    policy: str,
) -> None:
    root = snapshot_roots["2-socket-4-node-40-core"]
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {"policy": {"name": policy, "reservedCPUs": "0", "preferCloseToDevices": True}}
        )
    )
    pods = tmp_path / "pods.yaml"
    pods.write_text(yaml.safe_dump_all([nic_pod("near", "4"), nic_pod("far", "2")]))
    devices = tmp_path / "devices.yaml"
    devices.write_text(
        yaml.safe_dump(
            {
                "prod/near/c": {"devices": ["example.com/fake-nic=nic-0"], "numaNodes": [2]},
                "prod/far/c": {"devices": ["example.com/fake-nic=nic-1"], "numaNodes": [9]},
            }
        )
    )
    assert plan_command(str(cfg), str(root), str(pods), "json", str(devices)) == 0
    rows = {r["pod"]: r for r in json.loads(capsys.readouterr().out)}
    topology = read_topology(str(root))
    assert topology.nodes_of_cpus(CPUSet.parse(rows["near"]["cpus"])) == {2}
    assert rows["near"]["mems"] == "2"
    assert rows["near"]["devices"] == "close to devices example.com/fake-nic=nic-0 on NUMA node 2"
    assert "NUMA node 9, which this machine does not have" in rows["far"]["devices"]
    assert plan_command(str(cfg), str(root), str(pods), "table", str(devices)) == 0
    assert "DEVICES prod/near/c: close to devices" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("content", "named"),
    [
        ({"prod/near": {"devices": ["a"]}}, "prod/near: the key must be namespace/pod/container"),
        ({"prod/near/c": {"devices": []}}, "prod/near/c.devices"),
        ({"prod/near/c": {"devices": ["a"], "numaNodes": ["1"]}}, "prod/near/c.numaNodes"),
        ({"prod/near/c": {"devices": ["a"], "numa": [1]}}, "only the keys devices and numaNodes"),
        (["prod/near/c"], "must map namespace/pod/container"),
    ],
)
def test_plan_names_the_bad_devices_entry(
    tmp_path: Path,
    snapshot_roots: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
    content: Any,
    named: str,
) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump({"policy": {"name": "static", "preferCloseToDevices": True}}))
    pods = tmp_path / "pods.yaml"
    pods.write_text(yaml.safe_dump(nic_pod("near", "2")))
    devices = tmp_path / "devices.yaml"
    devices.write_text(yaml.safe_dump(content))
    root = str(snapshot_roots["2-socket-4-node-40-core"])
    assert plan_command(str(cfg), root, str(pods), "json", str(devices)) == 1
    err = capsys.readouterr().err
    assert named in err and "Traceback" not in err
