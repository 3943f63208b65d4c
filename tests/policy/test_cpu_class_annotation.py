"""A CPU class for topology-aware's exclusive CPUs, asked for with the contract's
`cpuclass.resource-enforcer.dev/container.C` or `.../pod` annotation: the policy says which
CPUs are in which class (pure), a container without exclusive CPUs gets none and says why, the
choice survives a restart from the state, and `plan` shows it on a real server snapshot."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import yaml

from enforcer.policy import make_policy
from enforcer.topology import CPUSet
from resource_contract.policy_config import PolicyConfig
from tests.policy.tasupport import MACHINE, policy, req
from tests.policy.test_plan_workloads import run_plan

ANNOTATION = "cpuclass.resource-enforcer.dev"


def with_class(name: str, milli: int, cls: str, qos: str = "Guaranteed", **prefs: bool):  # type: ignore[no-untyped-def]
    return dataclasses.replace(req(name, milli, qos, **prefs), cpu_class=cls)


def test_exclusive_and_mixed_containers_put_their_own_cpus_in_their_class() -> None:
    p = policy(reservedCPUs="0")
    whole = p.admit(with_class("whole", 2000, "turbo"))
    mixed = p.admit(with_class("mixed", 2500, "eco"))
    plain = p.admit(req("plain", 1000))  # exclusive, asked for no class
    assert len(whole.exclusive) == 2 and len(mixed.exclusive) == 2
    classes = p.cpu_classes()
    assert classes == {
        **dict.fromkeys(whole.exclusive, "turbo"),
        **dict.fromkeys(mixed.exclusive, "eco"),
    }
    # The mixed container's fraction runs on shared CPUs, which stay out of every class.
    assert not (set(classes) & (mixed.cpus - mixed.exclusive))
    assert not (set(classes) & plain.exclusive)
    assert p.cpu_class_ignored(req("whole", 2000).key) is None
    # Released: its CPUs leave the class.
    p.release(req("whole", 2000).key)
    assert p.cpu_classes() == dict.fromkeys(mixed.exclusive, "eco")


def test_a_container_without_exclusive_cpus_gets_no_class_and_says_why() -> None:
    p = policy(reservedCPUs="0")
    p.admit(with_class("web", 500, "turbo", qos="Burstable"))
    p.admit(with_class("shy", 2000, "turbo", shared=True))  # prefer-shared-cpus
    assert p.cpu_classes() == {}
    assert p.cpu_class_ignored(req("web", 500).key) == (
        "CPU class turbo is not applied: the container has no exclusive CPUs (it runs shared); "
        "a CPU class applies to exclusive CPUs only"
    )
    assert "no exclusive CPUs" in (p.cpu_class_ignored(req("shy", 2000).key) or "")


def test_other_policies_say_they_do_not_read_the_annotation() -> None:
    static = make_policy(MACHINE, PolicyConfig(name="static", reservedCPUs="0"))
    static.admit(with_class("app", 2000, "turbo"))
    assert static.cpu_classes() == {}
    assert "the static policy does not read cpuclass annotations" in (
        static.cpu_class_ignored(req("app", 2000).key) or ""
    )


def test_the_class_comes_back_with_the_saved_state() -> None:
    p = policy(reservedCPUs="0")
    p.admit(with_class("whole", 3000, "turbo"))
    again = policy(reservedCPUs="0")
    assert again.restore(p.to_state()) == []
    assert again.cpu_classes() == p.cpu_classes() and len(again.cpu_classes()) == 3


def test_plan_shows_each_containers_class_and_the_cpus_of_each_class(
    snapshot_roots: dict[str, Path], tmp_path: Path
) -> None:
    config = {
        "policy": {"name": "topology-aware", "reservedCPUs": "0"},
        "cpuClasses": {"turbo": {"maxFreq": 3800000}},
    }

    def pod(name: str, cpu: str, annotations: dict[str, str]) -> dict:
        resources = {"limits": {"cpu": cpu, "memory": "1Gi"}}
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "ai", "annotations": annotations},
            "spec": {"containers": [{"name": "app", "image": "x", "resources": resources}]},
        }

    pods = [
        pod("fast", "4", {f"{ANNOTATION}/container.app": "turbo"}),
        pod("web", "500m", {f"{ANNOTATION}/pod": "turbo"}),
    ]
    done = run_plan(
        tmp_path, snapshot_roots["sample1"], config, yaml.safe_dump_all(pods), "--format", "table"
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    header = lines[0].split()
    assert "CPU-CLASS" in header
    column = header.index("CPU-CLASS")
    row = {line.split()[1]: line.split() for line in lines[1:3]}
    assert row["fast"][column] == "turbo" and row["web"][column] == "-"
    (table,) = [i for i, line in enumerate(lines) if line.startswith("CPU-CLASS")]
    name, count, cpus = lines[table + 1].split()
    assert (name, count) == ("turbo", "4") and len(CPUSet.parse(cpus)) == 4
    assert (
        "NOTE ai/web/app: CPU class turbo is not applied: the container has no exclusive CPUs"
        in done.stdout
    )
    # An unknown class is refused, naming the key, as on the node.
    pods[1]["metadata"]["annotations"] = {f"{ANNOTATION}/pod": "turob"}
    done = run_plan(
        tmp_path, snapshot_roots["sample1"], config, yaml.safe_dump_all(pods), "--format", "table"
    )
    assert done.returncode == 2
    assert f'"{ANNOTATION}/pod": CPU class "turob" is not configured' in done.stdout
