"""goresctrl's RDT syntax: accepted unchanged, and refused with the key path on any machine."""

from __future__ import annotations

from typing import Any

import pytest

from enforcer.configuration import parse_config
from enforcer.controllers.rdt.allocation import (
    parse_cache_allocation,
    parse_mb_allocation,
    parse_proportion,
)
from enforcer.controllers.rdt.values import (
    BitMask,
    CacheIdAllocation,
    MbValue,
    Percent,
    PercentRange,
)
from resource_contract.config import ConfigError


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("60%", Percent(60)),
        ("100%", Percent(100)),
        ("50-100%", PercentRange(50, 100)),
        ("0-20%", PercentRange(0, 20)),
        ("0xff0", BitMask(0xFF0)),
        ("0XF", BitMask(0xF)),
        ("4-11", BitMask(0xFF0)),
        ("7", BitMask(0x80)),
        ("2,3", BitMask(0xC)),
        ("0-3,4-5", BitMask(0x3F)),
    ],
)
def test_cache_values(text: str, value: object) -> None:
    assert parse_proportion(text) == value


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("0xf0f", "is not contiguous"),
        ("0-3,5", "is not contiguous"),
        ("0x0", "empty mask"),
        ("0xg", "not a hexadecimal mask"),
        ("0%", "must be 1-100%"),
        ("101%", "must be 1-100%"),
        ("60-50%", "LOW <= HIGH <= 100"),
        ("50-101%", "LOW <= HIGH <= 100"),
        ("5-3", 'bit range "5-3" must go upwards'),
        ("60-70", "beyond any cache mask"),
        ("half", "is not a cache allocation"),
        (4080, "YAML reads an unquoted 0xff0 as the number 4080"),
        (True, "must be a string"),
    ],
)
def test_cache_value_refusals(raw: Any, reason: str) -> None:
    with pytest.raises(ValueError, match="value: ") as err:
        parse_proportion(raw)
    assert reason in str(err.value)


def test_per_cache_id_maps_and_cdp() -> None:
    alloc = parse_cache_allocation(
        {"all": "50%", "1": "0xf", "2-3": {"unified": "60%", "code": "100%", "data": "0-3"}}
    )
    assert alloc is not None
    assert alloc.at(0) == CacheIdAllocation(Percent(50))
    assert alloc.at(1) == CacheIdAllocation(BitMask(0xF))
    assert alloc.at(3) == CacheIdAllocation(Percent(60), Percent(100), BitMask(0xF))
    assert alloc.at(3).effective("code") == Percent(100)
    assert alloc.at(0).effective("data") == Percent(50)  # code/data fall back to unified
    # A plain value means every cache id.
    plain = parse_cache_allocation("0xff")
    assert plain is not None and plain.at(7) == CacheIdAllocation(BitMask(0xFF))


def test_mb_values() -> None:
    mb = parse_mb_allocation(["50%", "1000MBps"])
    assert mb is not None and mb.at(0) == MbValue(50, 1000)
    mb = parse_mb_allocation({"all": ["100%"], "1": ["30%"]})
    assert mb is not None and mb.at(1) == MbValue(30, None) and mb.at(0) == MbValue(100, None)


BASE: dict[str, Any] = {"partitions": {"p1": {"l3Allocation": "100%", "classes": {"c": {}}}}}


def problems_of(rdt: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as err:
        parse_config({"rdt": rdt})
    return err.value.problems


def p1(**fields: Any) -> dict[str, Any]:
    return {"partitions": {"p1": fields}}


@pytest.mark.parametrize(
    ("rdt", "line"),
    [
        (
            p1(l3Allocation="0xf0f"),
            'rdt.partitions.p1.l3Allocation: "0xf0f" (0xf0f) is not contiguous',
        ),
        (
            p1(l3Allocation={"0": "50%"}),
            'rdt.partitions.p1.l3Allocation: the "all" key is required',
        ),
        (
            p1(l3Allocation={"all": "50%", "x": "10%"}),
            'rdt.partitions.p1.l3Allocation.x: "x" is not "all" or a list of cache ids',
        ),
        (
            p1(l3Allocation={"unified": "50%"}),
            "put {unified, code, data} under a cache id",
        ),
        (
            p1(l3Allocation={"all": "50%", "0-1": "10%", "1": "20%"}),
            'rdt.partitions.p1.l3Allocation.1: cache id 1 is also listed under "0-1"',
        ),
        (
            p1(l3Allocation={"all": {"unified": "50%", "code": "50%"}}),
            "rdt.partitions.p1.l3Allocation.all: code and data go together",
        ),
        (
            p1(l3Allocation={"all": {"code": "50%", "data": "50%"}}),
            "rdt.partitions.p1.l3Allocation.all: unified is required",
        ),
        (
            p1(l3Allocation={"all": {"unified": "50%", "cod": "1%"}}),
            "rdt.partitions.p1.l3Allocation.all.cod: unknown key",
        ),
        (p1(l3Allocation="50-100%"), 'rdt.partitions.p1.l3Allocation: "50-100%" is a range'),
        (p1(l3Allocation=4080), "rdt.partitions.p1.l3Allocation: must be a string"),
        (p1(mbAllocation="50%"), "rdt.partitions.p1.mbAllocation: must be a list"),
        (p1(mbAllocation=["50"]), "rdt.partitions.p1.mbAllocation.0: '50' is not a bandwidth"),
        (p1(mbAllocation=["150%"]), 'rdt.partitions.p1.mbAllocation.0: "150%": a percentage'),
        (
            p1(mbAllocation=["50%", "60%"]),
            "rdt.partitions.p1.mbAllocation.1: a second percentage",
        ),
        (
            p1(classes={"c": {"l3Allocation": "50%"}}),
            'rdt.partitions.p1.classes.c.l3Allocation: partition "p1" has no l3Allocation',
        ),
        (
            p1(classes={"c": {"mbAllocation": ["50%"]}}),
            'rdt.partitions.p1.classes.c.mbAllocation: partition "p1" has no mbAllocation',
        ),
        (
            p1(classes={"c": {"kubernetes": {"denyPodAnnotation": True}}}),
            "rdt.partitions.p1.classes.c.kubernetes: goresctrl's per-class kubernetes options",
        ),
        (
            {"partitions": {"a": {"classes": {"x": {}}}, "b": {"classes": {"x": None}}}},
            'rdt.partitions.b.classes.x: class "x" is also defined in partition "a"',
        ),
        (
            {"partitions": {"a": {"l3Allocation": "60%"}, "b": {"l3Allocation": "50%"}}},
            "rdt.partitions: L3 (the all value): partitions ask for 110% in all (a 60%, b 50%)",
        ),
        (
            {"partitions": {"a": {"l3Allocation": "0xff"}, "b": {"l3Allocation": "0xf0"}}},
            "rdt.partitions.b.l3Allocation: L3 (the all value): mask 0xf0 overlaps partition "
            '"a"\'s 0xff',
        ),
        (
            {"partitions": {"a": {"l3Allocation": "0xff"}, "b": {"l3Allocation": "50%"}}},
            "rdt.partitions.b.l3Allocation: L3 (the all value): percentages and masks do not mix",
        ),
        (
            {"partitions": {"a": {"l3Allocation": "50%"}, "b": {}}},
            "rdt.partitions.b: no l3Allocation while partition a has one",
        ),
        (
            {
                "partitions": {
                    "a": {
                        "l3Allocation": {"all": {"unified": "50%", "code": "50%", "data": "50%"}}
                    },
                    "b": {"l3Allocation": "50%"},
                }
            },
            "rdt.partitions.b.l3Allocation: no L3 code (the all value) allocation while "
            "partition a has one",
        ),
        # Names: pydantic's check, key path up to the class map.
        (p1(classes={"../x": {}}), 'rdt.partitions.p1.classes: class name "../x" must match'),
        (p1(classes={"a/b": {}}), 'rdt.partitions.p1.classes: class name "a/b" must match'),
        (p1(classes={"..": {}}), 'rdt.partitions.p1.classes: class name ".." must match'),
        ({"partitions": {"p/1": {}}}, 'rdt.partitions: partition name "p/1" must match'),
        (p1(l3Alocation="50%"), "rdt.partitions.p1.l3Alocation: Extra inputs are not permitted"),
    ],
)
def test_refusals_name_the_key_path(rdt: dict[str, Any], line: str) -> None:
    problems = problems_of(rdt)
    assert any(line in p for p in problems), problems


def test_goresctrl_documentation_example_is_accepted() -> None:
    # The example of goresctrl's README, unchanged (class names aside, as they are ours).
    config = parse_config(
        {
            "rdt": {
                "options": {
                    "l2": {"optional": True},
                    "l3": {"optional": True},
                    "mb": {"optional": True},
                },
                "partitions": {
                    "exclusive": {
                        "l2Allocation": "60%",
                        "l3Allocation": "60%",
                        "mbAllocation": ["100%"],
                        "classes": {
                            "Guaranteed": {"l2Allocation": "100%", "l3Allocation": "100%"},
                        },
                    },
                    "shared": {
                        "l2Allocation": "39%",
                        "l3Allocation": "39%",
                        "mbAllocation": ["50%"],
                        "classes": {
                            "Burstable": {
                                "l2Allocation": {
                                    "all": {"unified": "100%", "code": "100%", "data": "80%"}
                                },
                                "l3Allocation": {"all": "100%", "1": "0-8"},
                                "mbAllocation": ["100%"],
                            },
                            "BestEffort": {
                                "l3Allocation": "20-50%",
                                "mbAllocation": ["50%", "1000MBps"],
                            },
                            "system/default": {"l3Allocation": "60%"},
                        },
                    },
                },
            }
        }
    )
    assert config.configured_classes("rdt") == {"Guaranteed", "Burstable", "BestEffort"}


def test_many_problems_are_all_reported() -> None:
    problems = problems_of(
        {
            "partitions": {
                "a": {"l3Allocation": "0xf0f", "mbAllocation": ["1%", "x"], "classes": {"c": {}}},
                "b": {"l3Allocation": "0-3,5", "classes": {"c": {}}},
            }
        }
    )
    assert len(problems) == 4, problems
