"""The configuration file: what is accepted, and that every refusal names its key path."""

from pathlib import Path

import pytest

from enforcer.configuration import load_config, parse_config
from resource_contract.config import ConfigError

FULL = """
policy:
  name: topology-aware
  reservedCPUs: "0-1"
  availableCPUs: "0-63"
  pinMemory: true
  preferIsolatedCPUs: true
  preferSharedCPUs: false
  reservedNamespaces: [kube-system]
rdt:
  options: {l3: {optional: true}, mb: {optional: true}}
  partitions:
    exclusive:
      l3Allocation: "60%"
      mbAllocation: ["100%"]
      classes:
        gold: {l3Allocation: "100%"}
    shared:
      l3Allocation: {all: "40%", "1": "0xf"}
      classes:
        system/default: {l3Allocation: "100%"}
        Burstable: {l3Allocation: {all: {unified: "100%", code: "100%", data: "50%"}}}
blockio:
  Classes:
    throttled:
      - Weight: 80
      - Devices: ["/dev/vd*"]
        ThrottleReadBps: 50M
        ThrottleWriteIOPS: 10k
classAccess:
  rdt: {gold: ["prod-*"]}
  blockio: {}
preferenceAccess:
  cpu.preserve: ["kube-system"]
  prefer-reserved-cpus: ["kube-system", "monitoring"]
  prefer-isolated-cpus: ["rt-*"]
  prefer-shared-cpus: ["*"]
metrics:
  address: "127.0.0.1:8891"
"""


def test_full_example_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(FULL)
    config = load_config(path)
    assert config.policy.name == "topology-aware"
    # The root group is configured but never asked for by name.
    assert config.configured_classes("rdt") == {"gold", "Burstable"}
    assert config.configured_classes("blockio") == {"throttled"}
    assert config.class_access().allows("rdt", "gold", "prod-a")
    assert not config.class_access().allows("rdt", "gold", "dev")
    access = config.preference_access()
    assert access.allows("prefer-reserved-cpus", "monitoring")
    assert access.allows("prefer-isolated-cpus", "rt-audio")
    assert not access.allows("prefer-isolated-cpus", "web")
    assert not access.allows("cpu.preserve", "monitoring")


def test_empty_file_means_policy_none() -> None:
    assert parse_config(None).policy.name == "none"


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ({"polcy": {}}, "polcy: Extra inputs are not permitted"),
        ({"policy": {"name": "fancy"}}, "policy.name: "),
        ({"policy": {"reservedCPUs": "abc"}}, 'policy.reservedCPUs: "abc"'),
        ({"policy": {"reservedCPUs": True}}, "policy.reservedCPUs: must be"),
        ({"policy": {"reservedCPUs": "-1"}}, "policy.reservedCPUs: "),
        ({"policy": {"availableCPUs": "0-"}}, "policy.availableCPUs: "),
        ({"policy": {"pinMemory": "maybe"}}, "policy.pinMemory: "),
        ({"policy": {"reservedNamespaces": "kube-system"}}, "policy.reservedNamespaces: "),
        ({"rdt": {"partitions": {"p": {"classes": {"../x": {}}}}}}, "rdt.partitions.p.classes"),
        ({"rdt": {"partitions": {"p": {"l3Alocation": "50%"}}}}, "rdt.partitions.p.l3Alocation"),
        ({"rdt": {"options": {"l4": {}}}}, "rdt.options.l4"),
        ({"blockio": {"Classes": {"a/b": []}}}, "blockio.Classes"),
        ({"blockio": {"Classes": {"x": [{"Weigth": 10}]}}}, "blockio.Classes.x.0.Weigth"),
        ({"classAccess": {"rdt": {"gold": ["a"]}}}, "classAccess.rdt.gold: no rdt class"),
        ({"classAccess": {"net": {}}}, "classAccess.net"),
        (
            {"preferenceAccess": {"prefer-bogus-cpus": ["*"]}},
            "preferenceAccess.prefer-bogus-cpus: Extra inputs are not permitted",
        ),
        (
            # Only the annotations' own spelling: a Python-style name is an unknown key too.
            {"preferenceAccess": {"cpu_preserve": ["*"]}},
            "preferenceAccess.cpu_preserve: Extra inputs are not permitted",
        ),
        ({"preferenceAccess": {"cpu.preserve": "kube-system"}}, "preferenceAccess.cpu.preserve: "),
        ({"preferenceAccess": {"prefer-shared-cpus": [7]}}, "preferenceAccess.prefer-shared-cpus"),
        ({"preferenceAccess": ["cpu.preserve"]}, "preferenceAccess: "),
        ([1, 2], "(top level): must be a mapping"),
    ],
)
def test_refusals_name_the_key_path(data: object, problem: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(data)
    assert any(problem in line for line in err.value.problems), err.value.problems


@pytest.mark.parametrize(
    ("value", "kind"), [(2, int), ("1500m", str), ("0-1,4", str), (1.5, float)]
)
def test_reserved_cpus_accepts_cpusets_and_quantities(value: object, kind: type) -> None:
    assert isinstance(parse_config({"policy": {"reservedCPUs": value}}).policy.reservedCPUs, kind)


def test_unreadable_and_non_yaml_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("policy: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)


@pytest.mark.parametrize("name", ["info", "mon_groups", "mon_data", "tasks"])
def test_the_kernels_resctrl_names_are_not_rdt_classes(name: str) -> None:
    data = {"rdt": {"partitions": {"p": {"l3Allocation": "100%", "classes": {name: {}}}}}}
    with pytest.raises(ConfigError) as err:
        parse_config(data)
    (problem,) = err.value.problems
    assert problem.startswith("rdt.partitions.p.classes")
    assert f'"{name}" is reserved by the kernel in resctrl' in problem
    # Block-I/O classes are no folders in resctrl: the same names are fine there.
    parse_config({"blockio": {"Classes": {name: [{"Weight": 100}]}}})
