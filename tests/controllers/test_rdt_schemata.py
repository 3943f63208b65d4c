"""Configuration + hardware -> exact schemata, on fake resctrl trees of several shapes; and
the configurations a given machine cannot run, refused with their key paths.

Expected masks are worked out by hand from goresctrl's arithmetic (see the comments)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from enforcer.configuration import parse_config
from enforcer.controllers.errors import RdtUnavailable
from enforcer.controllers.rdt import compute_schemata, plan_rdt, read_resctrl_info
from enforcer.controllers.rdt.hardware import ResctrlInfo
from resource_contract.config import ConfigError
from tests.support.fake_resctrl import CacheShape, FakeResctrl, MbShape, ResctrlShape

Make = Callable[..., FakeResctrl]

L3_11 = ResctrlShape(l3=CacheShape(cbm_mask=0x7FF, num_closids=16))
L3_20_CDP_MB = ResctrlShape(
    l3=CacheShape(cbm_mask=0xFFFFF, num_closids=16, cdp=True),
    mb=MbShape(min_bandwidth=10, bandwidth_gran=10, num_closids=8),
)
L3_20_MBPS = ResctrlShape(l3=CacheShape(cbm_mask=0xFFFFF), mb=MbShape(mbps=True))
L2_L3_MIN2 = ResctrlShape(
    l3=CacheShape(cbm_mask=0x7FF, min_cbm_bits=2, num_closids=4, cache_ids=(0,)),
    l2=CacheShape(cbm_mask=0xFF, min_cbm_bits=2, num_closids=4, cache_ids=(0, 1, 2, 3)),
)


def info_of(fake: FakeResctrl) -> ResctrlInfo:
    return read_resctrl_info(fake.root, options=fake.mount_options)


def schemata(fake: FakeResctrl, rdt: dict[str, Any]) -> dict[str, str]:
    return compute_schemata(parse_config({"rdt": rdt}).rdt, info_of(fake))


def refusals(fake: FakeResctrl, rdt: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as err:
        compute_schemata(parse_config({"rdt": rdt}).rdt, info_of(fake))
    return err.value.problems


# -- the hardware as read ---------------------------------------------------------------------


def test_hardware_is_read_from_info_and_root_schemata(fake_resctrl: Make) -> None:
    info = info_of(fake_resctrl(L3_20_CDP_MB))
    l3 = info.cat["L3"]
    assert (l3.cbm_mask, l3.width, l3.min_cbm_bits, l3.cdp, l3.cache_ids) == (
        0xFFFFF,
        20,
        1,
        True,
        (0, 1),
    )
    assert l3.num_closids == 8  # the kernel halves CLOS ids with CDP
    assert info.mb is not None and (info.mb.min_bandwidth, info.mb.mbps) == (10, False)
    assert info.num_closids == 8
    assert "L2" not in info.cat
    mbps = info_of(fake_resctrl(L3_20_MBPS))
    assert mbps.mb is not None and mbps.mb.mbps


def test_no_resctrl_is_unavailable(tmp_path: Any) -> None:
    with pytest.raises(RdtUnavailable, match="no resctrl filesystem is mounted at"):
        read_resctrl_info(tmp_path / "resctrl")
    (tmp_path / "mon" / "info" / "L3_MON").mkdir(parents=True)
    (tmp_path / "mon" / "schemata").write_text("")
    with pytest.raises(RdtUnavailable, match="monitoring only"):
        read_resctrl_info(tmp_path / "mon")


# -- exact schemata ----------------------------------------------------------------------------


def test_relative_partitions_on_an_11_bit_cache(fake_resctrl: Make) -> None:
    # 11 bits, exclusive 60% + shared 40%. Smallest first: shared gets 40*11//100 = 4 bits,
    # exclusive the remaining 7. Laid out by name: exclusive 0x7f, shared 0x780.
    got = schemata(
        fake_resctrl(L3_11),
        {
            "partitions": {
                "exclusive": {
                    "l3Allocation": "60%",
                    "classes": {"gold": {}, "silver": {"l3Allocation": "50%"}},
                },
                "shared": {
                    "l3Allocation": "40%",
                    "classes": {
                        "system/default": {},
                        "Burstable": {"l3Allocation": "50-100%"},
                        "BestEffort": {"l3Allocation": "0x1"},
                    },
                },
            }
        },
    )
    assert got == {
        "gold": "L3:0=7f;1=7f\n",  # no value: the whole partition
        "silver": "L3:0=f;1=f\n",  # 50% of 7 bits: bits 0..(49*7//100=3)
        "system/default": "L3:0=780;1=780\n",
        "Burstable": "L3:0=700;1=700\n",  # bits 49*4//100=1 .. 99*4//100=3 of 0x780
        "BestEffort": "L3:0=80;1=80\n",  # 0x1 from the partition's lowest bit (7)
    }


def test_cdp_masks_and_memory_bandwidth(fake_resctrl: Make) -> None:
    got = schemata(
        fake_resctrl(L3_20_CDP_MB),
        {
            "partitions": {
                "dedicated": {
                    "l3Allocation": {"all": "0xff000", "1": "0xf0000"},
                    "mbAllocation": ["80%"],
                    "classes": {
                        "db": {
                            "l3Allocation": {
                                "all": {"unified": "100%", "code": "0-3", "data": "50-100%"}
                            },
                            "mbAllocation": ["50%"],
                        }
                    },
                },
                "common": {
                    "l3Allocation": {"all": "0xfff", "1": "0xffff"},
                    "classes": {"system/default": {}, "web": {"l3Allocation": "25%"}},
                },
            }
        },
    )
    assert got == {
        # code 0-3 from bit 12 (id 0) and bit 16 (id 1); data 50-100% of 8 bits = bits 3-7
        # (0xf8000), of 4 bits = bits 1-3 (0xe0000); MB 50% of 80% = 40.
        "db": "L3CODE:0=f000;1=f0000\nL3DATA:0=f8000;1=e0000\nMB:0=40;1=40\n",
        # No CDP values: code and data take the unified mask; no MB in the partition: 100.
        "system/default": "L3CODE:0=fff;1=ffff\nL3DATA:0=fff;1=ffff\nMB:0=100;1=100\n",
        # 25% of 12 bits: bits 0..2; of 16 bits: bits 0..3.
        "web": "L3CODE:0=7;1=f\nL3DATA:0=7;1=f\nMB:0=100;1=100\n",
    }


def test_memory_bandwidth_floor_and_rounding(fake_resctrl: Make) -> None:
    got = schemata(
        fake_resctrl(ResctrlShape(l3=None, mb=MbShape(min_bandwidth=10, bandwidth_gran=10))),
        {
            "partitions": {
                "p": {
                    "mbAllocation": {"all": ["50%"], "1": ["30%"]},
                    "classes": {"low": {"mbAllocation": ["5%"]}, "mid": {"mbAllocation": ["55%"]}},
                }
            }
        },
    )
    # 5% of 50 = 2 -> min_bandwidth 10; 55% of 50 = 27 -> 30 (the kernel's next step); 55% of
    # 30 = 16 -> 20.
    assert got == {"low": "MB:0=10;1=10\n", "mid": "MB:0=30;1=20\n"}


def test_mbps_mode(fake_resctrl: Make) -> None:
    got = schemata(
        fake_resctrl(L3_20_MBPS),
        {
            "partitions": {
                "p": {
                    "l3Allocation": "100%",
                    "mbAllocation": ["100%", "5000MBps"],
                    "classes": {
                        "a": {"mbAllocation": ["50%", "1000MBps"]},
                        "b": {"mbAllocation": {"all": ["50%", "8000MBps"], "1": ["200MBps"]}},
                        "c": {},
                    },
                }
            }
        },
    )
    assert got == {
        "a": "L3:0=fffff;1=fffff\nMB:0=1000;1=1000\n",
        "b": "L3:0=fffff;1=fffff\nMB:0=5000;1=200\n",  # capped at the partition's 5000
        "c": "L3:0=fffff;1=fffff\nMB:0=5000;1=5000\n",
    }


def test_l2_and_l3_with_min_cbm_bits(fake_resctrl: Make) -> None:
    got = schemata(
        fake_resctrl(L2_L3_MIN2),
        {
            "partitions": {
                "p": {
                    "l3Allocation": "100%",
                    "l2Allocation": {"all": "50%", "2-3": "100%"},
                    "classes": {
                        "a": {"l2Allocation": "1%", "l3Allocation": "1%"},
                        "b": {},
                        "system/default": {"l2Allocation": "2-3"},
                    },
                }
            }
        },
    )
    # L2: 50% of 8 bits = 0xf on ids 0-1, 100% = 0xff on 2-3. 1% is one bit, widened to
    # min_cbm_bits 2. Lines in the kernel's order: L3, then L2.
    assert got == {
        "a": "L3:0=3\nL2:0=3;1=3;2=3;3=3\n",
        "b": "L3:0=7ff\nL2:0=f;1=f;2=ff;3=ff\n",
        "system/default": "L3:0=7ff\nL2:0=c;1=c;2=c;3=c\n",  # bits 2-3 from bit 0
    }


def test_classes_without_allocations_get_full_lines(fake_resctrl: Make) -> None:
    got = schemata(fake_resctrl(L3_20_CDP_MB), {"partitions": {"p": {"classes": {"x": {}}}}})
    assert got == {"x": "L3CODE:0=fffff;1=fffff\nL3DATA:0=fffff;1=fffff\nMB:0=100;1=100\n"}


def test_partition_override_per_cache_id_only_checked_where_the_id_exists(
    fake_resctrl: Make,
) -> None:
    rdt = {
        "partitions": {
            "a": {"l3Allocation": {"all": "0xf", "1": "0xff"}},
            "b": {"l3Allocation": "0xf0"},
        }
    }
    one_id = fake_resctrl(ResctrlShape(l3=CacheShape(cache_ids=(0,))))
    assert schemata(one_id, rdt) == {}
    two_ids = fake_resctrl(L3_11)
    assert refusals(two_ids, rdt) == [
        "rdt.partitions.b.l3Allocation: L3 for cache id 1: mask 0xf0 overlaps partition "
        "\"a\"'s 0xff; partitions' cache shares must not overlap"
    ]


# -- refusals on a given machine -----------------------------------------------------------------


def classes(n: int) -> dict[str, Any]:
    return {"partitions": {"p": {"classes": {f"c{i}": {} for i in range(n)}}}}


def test_as_many_classes_as_clos_ids_allow(fake_resctrl: Make) -> None:
    fake = fake_resctrl(L2_L3_MIN2)  # 4 CLOS ids: the root group's and 3 more
    rdt = classes(3)
    rdt["partitions"]["p"]["classes"]["system/default"] = {}
    assert len(schemata(fake, rdt)) == 4
    assert refusals(fake, classes(4)) == [
        "rdt.partitions: 4 classes need 4 resctrl groups besides the root group, but this "
        "machine has 4 CLOS ids (num_closids) including the root group's: at most 3 classes "
        "besides system/default"
    ]
    cdp = fake_resctrl(L3_20_CDP_MB)  # 16 CLOS ids halved by CDP, MB has 8
    assert len(schemata(cdp, classes(7))) == 7
    assert "at most 7 classes" in refusals(cdp, classes(8))[0]


@pytest.mark.parametrize(
    ("shape", "rdt", "line"),
    [
        (
            L3_11,
            {"partitions": {"p": {"l3Allocation": "0xfff"}}},
            "rdt.partitions.p.l3Allocation: mask 0xfff is wider than this machine's L3 cache "
            "mask 0x7ff (cbm_mask)",
        ),
        (
            L2_L3_MIN2,
            {"partitions": {"p": {"l3Allocation": "0x1"}}},
            "rdt.partitions.p.l3Allocation: mask 0x1 has 1 bits; this machine's L3 cache needs "
            "at least 2 (min_cbm_bits)",
        ),
        (
            L2_L3_MIN2,
            {
                "partitions": {
                    "p": {"l3Allocation": "0xf0", "classes": {"c": {"l3Allocation": "2"}}}
                }
            },
            "rdt.partitions.p.classes.c.l3Allocation: mask 0x4 has 1 bits; this machine's L3 "
            "cache needs at least 2 (min_cbm_bits)",
        ),
        (
            L3_11,
            {
                "partitions": {
                    "p": {"l3Allocation": "0xf0", "classes": {"c": {"l3Allocation": "0x1f"}}}
                }
            },
            "rdt.partitions.p.classes.c.l3Allocation: mask 0x1f does not fit its partition's "
            "0xf0: a class's mask counts from the partition's lowest bit (here 0x1f << 4 = 0x1f0)",
        ),
        (
            ResctrlShape(l3=CacheShape(cbm_mask=0x7, min_cbm_bits=2)),
            {"partitions": {"a": {"l3Allocation": "50%"}, "b": {"l3Allocation": "50%"}}},
            "rdt.partitions: L3 for cache id 0: the cache's 3 bits cannot be split into a 50%, "
            "b 50% with at least 2 bits (min_cbm_bits) each",
        ),
        (
            ResctrlShape(mb=MbShape()),
            {"partitions": {"p": {"mbAllocation": ["1000MBps"]}}},
            "rdt.partitions.p.mbAllocation: no percentage: MBps values need resctrl mounted with "
            "mba_MBps, and this machine's is not",
        ),
        (
            L3_20_MBPS,
            {"partitions": {"p": {"mbAllocation": ["50%"]}}},
            "rdt.partitions.p.mbAllocation: no MBps value: this machine's resctrl is mounted "
            "with mba_MBps",
        ),
        (
            L3_11,
            {"partitions": {"p": {"mbAllocation": ["50%"]}}},
            "rdt.partitions.p.mbAllocation: memory bandwidth allocation is not available on this "
            "machine (no ",
        ),
        (
            L3_11,
            {
                "partitions": {
                    "p": {"l2Allocation": "50%", "classes": {"c": {"l2Allocation": "1%"}}}
                }
            },
            "rdt.partitions.p.classes.c.l2Allocation: L2 cache allocation is not available on "
            "this machine",
        ),
        (
            ResctrlShape(l3=None, mb=MbShape()),
            {"partitions": {"p": {"l3Allocation": "50%"}}},
            "set rdt.options.l3.optional: true to run without it",
        ),
    ],
)
def test_refusals(fake_resctrl: Make, shape: ResctrlShape, rdt: dict[str, Any], line: str) -> None:
    problems = refusals(fake_resctrl(shape), rdt)
    assert any(line in p for p in problems), problems


def test_optional_features_are_skipped_with_a_warning(fake_resctrl: Make) -> None:
    rdt = parse_config(
        {
            "rdt": {
                "options": {"mb": {"optional": True}, "l2": {"optional": True}},
                "partitions": {
                    "p": {
                        "l3Allocation": "50%",
                        "l2Allocation": "50%",
                        "mbAllocation": ["50%"],
                        "classes": {"c": {"mbAllocation": ["10%"]}},
                    }
                },
            }
        }
    ).rdt
    plan = plan_rdt(rdt, info_of(fake_resctrl(L3_11)))
    assert plan.schemata == {"c": "L3:0=1f;1=1f\n"}  # 50% of 11 bits: 5
    assert plan.warnings == (
        "rdt.options.l2.optional: L2 cache allocation is not available on this machine; "
        "1 setting(s) ignored",
        "rdt.options.mb.optional: memory bandwidth allocation is not available on this "
        "machine; 2 setting(s) ignored",
    )


def test_the_lead_example_config_on_one_and_two_cache_ids(fake_resctrl: Make) -> None:
    # tests/unit/test_config.py's FULL example: shared partition overrides cache id 1 with a
    # mask while exclusive stays relative. Fine where there is no cache id 1; refused where
    # there is (goresctrl does not mix masks and percentages between partitions).
    rdt = {
        "options": {"l3": {"optional": True}, "mb": {"optional": True}},
        "partitions": {
            "exclusive": {
                "l3Allocation": "60%",
                "mbAllocation": ["100%"],
                "classes": {"gold": {"l3Allocation": "100%"}},
            },
            "shared": {
                "l3Allocation": {"all": "40%", "1": "0xf"},
                "classes": {
                    "system/default": {"l3Allocation": "100%"},
                    "Burstable": {
                        "l3Allocation": {"all": {"unified": "100%", "code": "100%", "data": "50%"}}
                    },
                },
            },
        },
    }
    one = schemata(fake_resctrl(ResctrlShape(l3=CacheShape(cache_ids=(0,)))), rdt)
    assert one == {"gold": "L3:0=7f\n", "system/default": "L3:0=780\n", "Burstable": "L3:0=780\n"}
    assert refusals(fake_resctrl(L3_11), rdt) == [
        "rdt.partitions.exclusive.l3Allocation: L3 for cache id 1: percentages and masks do not "
        "mix between partitions (partitions shared use masks)"
    ]
