"""The balloons policy's configuration: the contract's keys load, mistakes are named by path."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from enforcer.configuration import parse_config
from resource_contract.config import ConfigError
from resource_contract.policy_config import PolicyConfig

CONTRACT_EXAMPLE = """
policy:
  name: balloons
  reservedCPUs: "0-1"
  balloonTypes:
    - name: inference
      namespaces: ["ai-*"]
      minCPUs: 4
      maxCPUs: 16
      minBalloons: 1
      maxBalloons: 4
      allocatorPriority: high
      preferNewBalloons: false
      preferSpreadingPods: false
      preferPerNamespaceBalloon: false
      shareIdleCPUsInSame: die
      cpuClass: turbo
      pinMemory: true
cpuClasses:
  turbo: {minFreq: 2800000, maxFreq: 3800000, uncoreMinFreq: 2000000, uncoreMaxFreq: 2400000,
          disabledCstates: [C6, C1E]}
"""


def problems(data: Any) -> list[str]:
    with pytest.raises(ConfigError) as err:
        parse_config(data)
    return err.value.problems


def test_the_contracts_example_loads() -> None:
    config = parse_config(yaml.safe_load(CONTRACT_EXAMPLE))
    (inference,) = config.policy.balloonTypes
    assert (inference.minCPUs, inference.maxCPUs, inference.maxBalloons) == (4, 16, 4)
    assert inference.shareIdleCPUsInSame == "die" and inference.allocatorPriority == "high"
    assert config.cpuClasses["turbo"].disabledCstates == ["C6", "C1E"]
    # The built-in types are always there: reserved first, default last.
    assert config.policy.balloon_type_names() == ["reserved", "inference", "default"]


def test_peer_numeric_allocator_priority_is_accepted() -> None:
    data = yaml.safe_load(CONTRACT_EXAMPLE)
    data["policy"]["balloonTypes"][0]["allocatorPriority"] = 2
    assert parse_config(data).policy.balloonTypes[0].allocatorPriority == "low"


def test_a_saved_configuration_validates_again() -> None:
    # The enforcer's state file keeps model_dump(); `status` validates it again.
    data = yaml.safe_load(CONTRACT_EXAMPLE)
    data["policy"]["balloonTypes"].append({"name": "reserved", "namespaces": ["infra"]})
    policy = parse_config(data).policy
    assert PolicyConfig.model_validate(policy.model_dump()) == policy


@pytest.mark.parametrize(
    ("change", "wanted"),
    [
        ({"policy.balloonTypes.0.colour": "red"}, "policy.balloonTypes.0.colour: Extra inputs"),
        ({"policy.balloonTypes.0.minCPUs": -1}, "policy.balloonTypes.0.minCPUs: "),
        ({"policy.balloonTypes.0.minCPUs": 20}, "policy.balloonTypes.0: minCPUs 20 is above"),
        ({"policy.balloonTypes.0.minBalloons": 5}, "policy.balloonTypes.0: minBalloons 5 is"),
        ({"policy.balloonTypes.0.shareIdleCPUsInSame": "rack"}, "shareIdleCPUsInSame: Input"),
        ({"policy.balloonTypes.0.allocatorPriority": "urgent"}, "allocatorPriority: Input"),
        ({"policy.balloonTypes.0.name": "a/b"}, "policy.balloonTypes.0.name: balloon type name"),
        ({"policy.balloonTypes.0.cpuClass": "eco"}, "policy.balloonTypes.0.cpuClass: CPU class"),
        ({"policy.reservedCPUs": None}, "policy.reservedCPUs: the balloons policy needs"),
        ({"policy.name": "static"}, "policy.balloonTypes: only read by the balloons policy"),
        ({"cpuClasses.turbo.maxFreq": 1000}, "cpuClasses.turbo: minFreq 2800000 is above"),
        ({"cpuClasses.turbo.minFreq": 0}, "cpuClasses.turbo.minFreq: "),
        ({"cpuClasses.turbo.boost": True}, "cpuClasses.turbo.boost: Extra inputs"),
        ({"cpuClasses.turbo.disabledCstates": ["../C6"]}, 'C-state name "../C6" must match'),
        ({"classAccess.balloon": {"infrence": ["x"]}}, "classAccess.balloon.infrence: no balloon"),
    ],
)
def test_mistakes_are_named_by_key_path(change: dict[str, Any], wanted: str) -> None:
    data = yaml.safe_load(CONTRACT_EXAMPLE)
    for path, value in change.items():
        *parents, last = path.split(".")
        node = data
        for part in parents:
            node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
        if value is None:
            del node[last]
        else:
            node[last] = value
    found = problems(data)
    assert any(wanted in p for p in found), found


def test_duplicate_types_are_refused() -> None:
    data = yaml.safe_load(CONTRACT_EXAMPLE)
    data["policy"]["balloonTypes"].append({"name": "inference"})
    assert problems(data) == ['policy.balloonTypes: balloon type "inference" is defined twice']


def test_the_reserved_balloon_has_a_fixed_size() -> None:
    data = yaml.safe_load(CONTRACT_EXAMPLE)
    data["policy"]["balloonTypes"].append({"name": "reserved", "maxCPUs": 4})
    (problem,) = problems(data)
    assert problem.startswith("policy.balloonTypes.1: the reserved balloon is policy.reservedCPUs")
