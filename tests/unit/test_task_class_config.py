"""`schedulingClasses`, `memoryClasses`, `irqIsolation` and their `classAccess` in the
configuration: every bad value refused with its key path, a real-time class refused unless
`classAccess.scheduling` lists it, names that must exist checked; and the enforcer's decoding of
the classes' annotations (container key before pod key, unknown, forbidden, malformed)."""

from __future__ import annotations

from typing import Any

import pytest

from enforcer.decode import DecodeError, decode_container
from enforcer.engine.shared import class_settings
from enforcer.refusal import Reason
from resource_contract.config import ConfigError, parse_config
from tests.engine.test_cpu_classes_engine import create_of

SCHED = "schedulingclass.resource-enforcer.dev"
MEM = "memoryclass.resource-enforcer.dev"


def problems(data: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as refused:
        parse_config(data)
    return refused.value.problems


@pytest.mark.parametrize(
    ("data", "line"),
    [
        ({"schedulingClasses": {"a": {"policy": "deadline"}}}, "schedulingClasses.a.policy: "),
        ({"schedulingClasses": {"a": {"nice": 20}}}, "schedulingClasses.a.nice: "),
        ({"schedulingClasses": {"a": {"nice": True}}}, "schedulingClasses.a.nice: "),
        ({"schedulingClasses": {"a": {"ioPriority": 8, "ioClass": "be"}}}, "a.ioPriority: "),
        (
            {"schedulingClasses": {"a": {"ioClass": "idle", "ioPriority": 3}}},
            "schedulingClasses.a: ioPriority 3: only ioClass rt or be takes a level",
        ),
        (
            {"schedulingClasses": {"a": {"policy": "batch", "priority": 3}}},
            "schedulingClasses.a: priority 3: only the real-time policies",
        ),
        (
            {"schedulingClasses": {"a": {"policy": "fifo", "priority": 0}}},
            "schedulingClasses.a: priority 0: policy fifo needs 1 to 99",
        ),
        ({"schedulingClasses": {"a": {"cpuBurst": "lots"}}}, "schedulingClasses.a.cpuBurst: "),
        ({"schedulingClasses": {"a": {"weight": 3}}}, "schedulingClasses.a.weight: "),
        ({"schedulingClasses": {"../x": {}}}, 'schedulingClasses: class name "../x" must match'),
        ({"memoryClasses": {"m": {"min": "150%"}}}, 'memoryClasses.m.min: "150%" is above 100%'),
        ({"memoryClasses": {"m": {"high": "-1Gi"}}}, 'memoryClasses.m.high: "-1Gi" is negative'),
        ({"memoryClasses": {"m": {"swapMax": "50%"}}}, "memoryClasses.m.swapMax: "),
        ({"irqIsolation": {"enabled": "yes"}}, "irqIsolation.enabled: "),
        (
            {"schedulingClasses": {"rt": {"policy": "rr", "priority": 5}}},
            "schedulingClasses.rt: policy rr is real-time: list the class in "
            "classAccess.scheduling.rt",
        ),
        (
            {"schedulingClasses": {"io": {"ioClass": "rt", "ioPriority": 0}}},
            "schedulingClasses.io: ioClass rt is real-time",
        ),
        (
            {"classAccess": {"memory": {"gone": ["*"]}}},
            "classAccess.memory.gone: no memory class of that name is configured",
        ),
        (
            {
                "policy": {
                    "name": "balloons",
                    "reservedCPUs": "0",
                    "balloonTypes": [{"name": "b", "schedulingClass": "nope"}],
                }
            },
            'policy.balloonTypes.0.schedulingClass: scheduling class "nope" is not configured',
        ),
    ],
)
def test_bad_values_are_refused_naming_the_key(data: dict[str, Any], line: str) -> None:
    found = problems(data)
    assert any(line in p for p in found), found


def test_the_contracts_example_is_valid() -> None:
    config = parse_config(
        {
            "schedulingClasses": {
                "realtime": {"policy": "fifo", "priority": 10},
                "background": {"policy": "idle", "nice": 10, "ioClass": "idle", "cpuBurst": "0"},
            },
            "memoryClasses": {"protected": {"min": "50%", "high": "90%", "swapMax": "0"}},
            "irqIsolation": {"enabled": False},
            "classAccess": {"scheduling": {"realtime": ["rt-*"]}, "memory": {}},
        }
    )
    assert set(config.schedulingClasses) == {"realtime", "background"}
    assert config.memoryClasses["protected"].high == "90%"


CONFIG = parse_config(
    {
        "schedulingClasses": {"quiet": {"nice": 10}, "loud": {"nice": -5}},
        "memoryClasses": {"guarded": {"low": "10%"}},
        "classAccess": {"scheduling": {"loud": ["prod-*"]}},
    }
)


def decode(annotations: dict[str, str]) -> Any:
    return decode_container(create_of("p", "1", annotations), classes=class_settings(CONFIG))


def test_the_container_key_wins_over_the_pod_key() -> None:
    request = decode(
        {f"{SCHED}/pod": "loud", f"{SCHED}/container.app": "quiet", f"{MEM}/pod": "guarded"}
    )
    assert (request.scheduling_class, request.memory_class) == ("quiet", "guarded")
    assert decode({}).scheduling_class is None


@pytest.mark.parametrize(
    ("annotations", "reason", "words"),
    [
        (
            {f"{SCHED}/pod": "loud"},
            Reason.FORBIDDEN,
            ['namespace "e2e"', "prod-*", "may use: quiet"],
        ),
        ({f"{MEM}/container.app": "other"}, Reason.BAD_REQUEST, ["not configured", "guarded"]),
        ({f"{SCHED}/container.x": "a/b"}, Reason.BAD_REQUEST, ["malformed"]),
    ],
)
def test_refused_requests_name_the_annotation(
    annotations: dict[str, str], reason: Reason, words: list[str]
) -> None:
    with pytest.raises(DecodeError) as refused:
        decode(annotations)
    assert refused.value.reason is reason
    (key,) = annotations
    message = str(refused.value)
    assert f'"{key}"' in message and all(w in message for w in words), message
