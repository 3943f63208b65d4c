"""Block I/O without the machine: syntax refusals, class compilation, and the exact lines
planned for cgroup v1 and v2."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from enforcer.configuration import parse_config
from enforcer.controllers.blockio import (
    BlockDevice,
    BlockIOClass,
    CgroupIO,
    DeviceSettings,
    Resolved,
    Write,
    compile_classes,
    plan_writes,
    v2_weight,
)
from resource_contract.class_config import BlockIOConfig
from resource_contract.config import ConfigError

SDA = BlockDevice(8, 0, "/dev/sda")
SDB = BlockDevice(8, 16, "/dev/sdb")
VDA = BlockDevice(254, 0, "/dev/vda")
DEVICES = {"/dev/sda": [SDA], "/dev/sdb": [SDB], "/dev/sd*": [SDA, SDB], "/dev/vda": [VDA]}


def fake_resolver(patterns: Sequence[str], key_path: str) -> Resolved:
    found = [d for p in patterns for d in DEVICES.get(p, [])]
    return Resolved(tuple(dict.fromkeys(found)))


def blockio(classes: dict[str, Any]) -> BlockIOConfig:
    config = parse_config({"blockio": {"Classes": classes}}).blockio
    assert config is not None
    return config


def compiled(classes: dict[str, Any]) -> dict[str, BlockIOClass]:
    return compile_classes(blockio(classes), resolver=fake_resolver)[0]


# -- syntax ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entries", "line"),
    [
        ([{"Weight": 5}], "blockio.Classes.c.0.Weight: 5 is outside 10-1000"),
        ([{"Weight": "1001"}], "blockio.Classes.c.0.Weight: 1001 is outside 10-1000"),
        ([{"Weight": "heavy"}], 'blockio.Classes.c.0.Weight: "heavy" is not a number'),
        (
            [{"Devices": ["/dev/sda"], "ThrottleReadBps": "fast"}],
            'blockio.Classes.c.0.ThrottleReadBps: "fast" is not a Kubernetes quantity',
        ),
        (
            [{"Devices": ["/dev/sda"], "ThrottleWriteIOPS": "-1"}],
            "blockio.Classes.c.0.ThrottleWriteIOPS: -1 is negative",
        ),
        (
            [{"Weight": 100}, {"ThrottleReadBps": "10M", "ThrottleWriteIOPS": 5}],
            "blockio.Classes.c.1: ThrottleReadBps, ThrottleWriteIOPS without Devices: "
            "throttling is set per device",
        ),
        ([{"Devices": [], "Weight": 50}], "blockio.Classes.c.0.Devices: empty"),
        (
            [{"Devices": ["sda"], "Weight": 50}],
            'blockio.Classes.c.0.Devices.0: "sda" must be an absolute path',
        ),
        (
            [{"Devices": ["/dev/sd[a-"], "Weight": 50}],
            'blockio.Classes.c.0.Devices.0: "/dev/sd[a-" is not a valid glob',
        ),
        ([{"Devices": "/dev/sda"}], "blockio.Classes.c.0.Devices: Input should be a valid list"),
        ([{"Wieght": 50}], "blockio.Classes.c.0.Wieght: Extra inputs are not permitted"),
    ],
)
def test_syntax_refusals(entries: list[dict[str, Any]], line: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config({"blockio": {"Classes": {"c": entries}}})
    assert any(line in p for p in err.value.problems), err.value.problems


@pytest.mark.parametrize("name", ["../x", "a/b", "..", "-x", "x" * 64])
def test_class_names_are_checked(name: str) -> None:
    with pytest.raises(ConfigError, match=f'blockio.Classes: class name "{name}" must match'):
        parse_config({"blockio": {"Classes": {name: []}}})


def test_goresctrl_documentation_example_is_accepted() -> None:
    classes = compiled(
        {
            "LowPrioThrottled": [
                {"Weight": 80},
                {
                    "Devices": ["/dev/sd[a-z]", "/dev/vd[a-z]"],
                    "ThrottleReadBps": "50M",
                    "ThrottleWriteBps": "10M",
                    "ThrottleReadIOPS": "10k",
                    "ThrottleWriteIOPS": "5k",
                    "Weight": 50,
                },
                {"Devices": ["/dev/disk/by-id/*SSD*"], "ThrottleReadBps": "100M", "Weight": 50},
            ],
            "HighPrioFullSpeed": [{"Weight": 400}],
            "Empty": None,
        }
    )
    assert classes["HighPrioFullSpeed"] == BlockIOClass("HighPrioFullSpeed", 400)
    assert classes["Empty"] == BlockIOClass("Empty")


# -- compilation ---------------------------------------------------------------------------------


def test_later_entries_win_per_device_and_setting() -> None:
    cls = compiled(
        {
            "c": [
                {"Weight": 80},
                {"Devices": ["/dev/sd*"], "ThrottleReadBps": "50M", "Weight": 200},
                {"Devices": ["/dev/sdb"], "ThrottleReadBps": "1Mi", "ThrottleWriteIOPS": "10k"},
                {"Weight": "90"},
                {"Devices": ["/dev/nothing"], "Weight": 10},
            ]
        }
    )["c"]
    assert cls == BlockIOClass(
        "c",
        weight=90,
        devices=(
            DeviceSettings(SDA, weight=200, read_bps=50_000_000),
            DeviceSettings(SDB, weight=200, read_bps=1_048_576, write_iops=10_000),
        ),
    )


def test_quantities_round_up_like_kubernetes() -> None:
    cls = compiled({"c": [{"Devices": ["/dev/vda"], "ThrottleReadBps": "1.5k", "Weight": "99.2"}]})
    assert cls["c"].devices == (DeviceSettings(VDA, weight=100, read_bps=1500),)


def test_resolver_problems_are_refusals_with_key_paths() -> None:
    def resolver(patterns: Sequence[str], key_path: str) -> Resolved:
        return Resolved((), (f"{key_path}.0: bad",), (f"{key_path}.1: nothing",))

    with pytest.raises(ConfigError) as err:
        compile_classes(
            blockio({"c": [{"Devices": ["/a", "/b"], "Weight": 50}]}), resolver=resolver
        )
    assert err.value.problems == ["blockio.Classes.c.0.Devices.0: bad"]
    config = blockio({"c": [{"Weight": 50}, {"Devices": ["/b"], "Weight": 60}]})
    warnings = compile_classes(
        config, resolver=lambda p, k: Resolved((), (), (f"{k}.0: nothing",))
    )[1]
    assert warnings == ["blockio.Classes.c.1.Devices.0: nothing"]


# -- planning --------------------------------------------------------------------------------------

CLASS = BlockIOClass(
    "c",
    weight=80,
    devices=(
        DeviceSettings(SDA, weight=200, read_bps=50_000_000, write_iops=10_000),
        DeviceSettings(VDA, read_bps=0, write_bps=1_000_000, read_iops=500),
    ),
)
V1 = frozenset(
    {
        "blkio.bfq.weight",
        "blkio.bfq.weight_device",
        "blkio.throttle.read_bps_device",
        "blkio.throttle.write_bps_device",
        "blkio.throttle.read_iops_device",
        "blkio.throttle.write_iops_device",
    }
)
V2 = frozenset({"cgroup.controllers", "io.max", "io.weight", "io.stat"})


def lines(writes: list[Write]) -> list[tuple[str, str]]:
    return [(w.file, w.line) for w in writes]


def test_v1_lines() -> None:
    writes = plan_writes(CLASS, CgroupIO(1, V1))
    assert lines(writes) == [
        ("blkio.bfq.weight", "80"),
        ("blkio.bfq.weight_device", "8:0 200"),
        ("blkio.throttle.read_bps_device", "8:0 50000000"),
        ("blkio.throttle.read_bps_device", "254:0 0"),  # 0 removes a limit
        ("blkio.throttle.write_bps_device", "254:0 1000000"),
        ("blkio.throttle.read_iops_device", "254:0 500"),
        ("blkio.throttle.write_iops_device", "8:0 10000"),
    ]
    assert [w.weight for w in writes] == [True, True, False, False, False, False, False]


def test_v1_resets_what_the_class_no_longer_sets() -> None:
    current = {
        "blkio.bfq.weight_device": frozenset({(8, 0), (8, 16)}),
        "blkio.throttle.read_bps_device": frozenset({(8, 16), (8, 0)}),
        "blkio.throttle.write_iops_device": frozenset({(254, 0)}),
    }
    writes = plan_writes(CLASS, CgroupIO(1, V1, current))
    assert ("blkio.bfq.weight_device", "8:16 default") in lines(writes)  # bfq refuses 0
    assert ("blkio.throttle.read_bps_device", "8:16 0") in lines(writes)
    assert ("blkio.throttle.write_iops_device", "254:0 0") in lines(writes)
    assert ("blkio.bfq.weight_device", "8:0 default") not in lines(writes)
    # cfq's files (kernels before 5.0): blkio.weight, and 0 removes a device weight.
    cfq_current = {"blkio.weight_device": frozenset({(8, 16)})}
    cfq = CgroupIO(1, frozenset({"blkio.weight", "blkio.weight_device"}), cfq_current)
    cfq_lines = lines(plan_writes(BlockIOClass("c", 300), cfq))
    assert cfq_lines[0] == ("blkio.weight", "300")
    assert ("blkio.weight_device", "8:16 0") in cfq_lines


def test_v2_lines_io_weight_scale() -> None:
    assert lines(plan_writes(CLASS, CgroupIO(2, V2))) == [
        ("io.weight", "default 708"),  # 1 + (80-10)*9999/990
        ("io.weight", "8:0 1920"),
        ("io.max", "8:0 rbps=50000000 wbps=max riops=max wiops=10000"),
        ("io.max", "254:0 rbps=max wbps=1000000 riops=500 wiops=max"),  # 0: no limit
    ]


def test_v2_lines_with_bfq_and_resets() -> None:
    current = {"io.max": frozenset({(8, 16), (8, 0)}), "io.bfq.weight": frozenset({(8, 16)})}
    cgroup = CgroupIO(2, V2 | {"io.bfq.weight"}, current)
    assert lines(plan_writes(CLASS, cgroup)) == [
        ("io.bfq.weight", "default 80"),  # bfq keeps the v1 scale
        ("io.bfq.weight", "8:0 200"),
        ("io.bfq.weight", "8:16 default"),
        ("io.max", "8:0 rbps=50000000 wbps=max riops=max wiops=10000"),
        ("io.max", "254:0 rbps=max wbps=1000000 riops=500 wiops=max"),
        ("io.max", "8:16 rbps=max wbps=max riops=max wiops=max"),
    ]


def test_a_class_without_settings_only_resets() -> None:
    current = {"io.max": frozenset({(254, 0)})}
    assert lines(plan_writes(BlockIOClass("none"), CgroupIO(2, V2, current))) == [
        ("io.max", "254:0 rbps=max wbps=max riops=max wiops=max")
    ]
    assert plan_writes(BlockIOClass("none"), CgroupIO(1, V1)) == []


@pytest.mark.parametrize(("v1", "v2"), [(10, 1), (100, 910), (500, 4950), (1000, 10000)])
def test_v2_weight_mapping(v1: int, v2: int) -> None:
    assert v2_weight(v1) == v2
