"""The RDT edge on a fake resctrl tree: groups, schemata, tasks, pruning, and every refusal."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from enforcer.configuration import parse_config
from enforcer.controllers.errors import (
    ApplyError,
    ClassUnavailable,
    InvalidClassName,
    RdtUnavailable,
    UnknownClass,
)
from enforcer.controllers.rdt import ResctrlGroups
from resource_contract.class_config import RDTConfig
from resource_contract.config import ConfigError
from tests.support.fake_cgroup import make_v1, make_v2
from tests.support.fake_resctrl import CacheShape, FakeResctrl, MbShape, ResctrlShape

Make = Callable[..., FakeResctrl]
SHAPE = ResctrlShape(
    l3=CacheShape(cbm_mask=0xFFFFF, num_closids=16), mb=MbShape(num_closids=8), tasks=(1, 2, 3)
)


def rdt(partitions: dict[str, Any]) -> RDTConfig:
    config = parse_config({"rdt": {"partitions": partitions}}).rdt
    assert config is not None
    return config


CONFIG = rdt(
    {
        "exclusive": {
            "l3Allocation": "60%",
            "mbAllocation": ["100%"],
            "classes": {"gold": {}, "silver": {"l3Allocation": "50%", "mbAllocation": ["50%"]}},
        },
        "shared": {
            "l3Allocation": "40%",
            "mbAllocation": ["50%"],
            "classes": {"system/default": {}, "Burstable": {"l3Allocation": "50-100%"}},
        },
    }
)


def controller(fake: FakeResctrl) -> ResctrlGroups:
    return ResctrlGroups(fake.root, fs=fake, mount_options=fake.mount_options)


def read(path: Path) -> str:
    return path.read_text()


# -- the fake is laid out like the kernel's tree -------------------------------------------------


def test_fake_tree_layout(fake_resctrl: Make) -> None:
    fake = fake_resctrl(
        ResctrlShape(
            l3=CacheShape(cbm_mask=0x7FF, cdp=True, num_closids=16, shareable_bits=0x600),
            mb=MbShape(),
            cpus=8,
        )
    )
    root = fake.root
    assert sorted(p.name for p in (root / "info").iterdir()) == [
        "L3CODE",
        "L3DATA",
        "L3_MON",
        "MB",
        "last_cmd_status",
    ]
    assert read(root / "info" / "L3CODE" / "cbm_mask") == "7ff\n"
    assert read(root / "info" / "L3DATA" / "num_closids") == "8\n"
    assert read(root / "info" / "L3CODE" / "shareable_bits") == "600\n"
    assert read(root / "info" / "MB" / "min_bandwidth") == "10\n"
    assert read(root / "info" / "L3_MON" / "mon_features").split() == [
        "llc_occupancy",
        "mbm_total_bytes",
        "mbm_local_bytes",
    ]
    # Names right-aligned, masks zero-padded, bandwidth in 3 columns, as the kernel prints.
    assert read(root / "schemata") == (
        "L3CODE:0=7ff;1=7ff\nL3DATA:0=7ff;1=7ff\n    MB:0=100;1=100\n"
    )
    assert read(root / "cpus_list") == "0-7\n" and read(root / "cpus") == "ff\n"
    assert read(root / "tasks") == "1\n"
    assert (root / "mon_groups").is_dir() and (root / "mon_data" / "mon_L3_01").is_dir()
    assert fake.mount_options == {"rw", "relatime", "cdp"}


def test_mkdir_populates_a_group_and_writes_merge_like_the_kernel(fake_resctrl: Make) -> None:
    fake = fake_resctrl(ResctrlShape(l3=CacheShape(cbm_mask=0xFFFFF), mb=MbShape()))
    group = fake.root / "g"
    fake.mkdir(group)
    assert sorted(os.listdir(group)) == [
        "cpus",
        "cpus_list",
        "mode",
        "mon_data",
        "mon_groups",
        "schemata",
        "size",
        "tasks",
    ]
    fake.write(group / "schemata", "L3:1=3c0\n")
    assert read(group / "schemata") == "L3:0=fffff;1=003c0\nMB:0=100;1=100\n"
    fake.write(group / "schemata", "MB:0=55\n")  # rounded up to bandwidth_gran
    assert read(group / "schemata") == "L3:0=fffff;1=003c0\nMB:0= 60;1=100\n"
    with pytest.raises(OSError, match="Invalid argument"):
        fake.write(group / "schemata", "L3:0=f0f\n")
    assert (
        read(fake.root / "info" / "last_cmd_status") == "The mask f0f has non-consecutive 1-bits\n"
    )


# -- configure -----------------------------------------------------------------------------------


def test_configure_makes_groups_with_their_schemata(fake_resctrl: Make) -> None:
    fake = fake_resctrl(SHAPE)
    ctl = controller(fake)
    assert ctl.configure(CONFIG) == []
    assert ctl.available
    assert fake.groups() == ["Burstable", "gold", "silver"]
    # 20 bits: shared 40% = 8 bits (0xff000), exclusive 12 (0xfff).
    assert ctl.schemata == {
        "system/default": "L3:0=ff000;1=ff000\nMB:0=50;1=50\n",
        "gold": "L3:0=fff;1=fff\nMB:0=100;1=100\n",
        "silver": "L3:0=3f;1=3f\nMB:0=50;1=50\n",
        "Burstable": "L3:0=f8000;1=f8000\nMB:0=50;1=50\n",
    }
    # Read back in the kernel's format: the root group is system/default.
    assert read(fake.root / "schemata") == "L3:0=ff000;1=ff000\nMB:0= 50;1= 50\n"
    assert read(fake.root / "gold" / "schemata") == "L3:0=00fff;1=00fff\nMB:0=100;1=100\n"
    assert read(fake.root / "silver" / "schemata") == "L3:0=0003f;1=0003f\nMB:0= 50;1= 50\n"
    assert read(fake.root / "info" / "last_cmd_status") == "ok\n"
    # Configuring again is idempotent.
    assert controller(fake).configure(CONFIG) == []
    assert fake.groups() == ["Burstable", "gold", "silver"]


def test_reload_prunes_groups_once_their_tasks_are_gone(fake_resctrl: Make) -> None:
    fake = fake_resctrl(SHAPE)
    ctl = controller(fake)
    ctl.configure(CONFIG)
    assert ctl.assign("silver", [2])
    fake.mkdir(fake.root / "not a class")  # another tool's, not a name we make: left alone
    smaller = rdt({"exclusive": {"l3Allocation": "100%", "classes": {"gold": {}}}})
    warnings = ctl.configure(smaller)
    assert warnings == [
        "rdt: resctrl group silver belongs to no configured class but still has tasks; it is "
        "removed once they are gone"
    ]
    assert fake.groups() == ["gold", "not a class", "silver"]
    assert read(fake.root / "gold" / "schemata") == "L3:0=fffff;1=fffff\nMB:0=100;1=100\n"
    # system/default left the configuration: the root group gets everything back.
    assert read(fake.root / "schemata") == "L3:0=fffff;1=fffff\nMB:0=100;1=100\n"
    fake.write(fake.root / "tasks", "2\n")  # the task leaves the group
    assert ctl.prune() == []
    assert fake.groups() == ["gold", "not a class"]
    # A group used through its CPUs is kept too.
    fake.mkdir(fake.root / "pinned")
    (fake.root / "pinned" / "cpus_list").write_text("2-3\n")
    assert "still has CPUs 2-3" in ctl.prune()[0]


def test_tasks_are_written_one_per_write_and_exited_ones_skipped(fake_resctrl: Make) -> None:
    fake = fake_resctrl(SHAPE)
    ctl = controller(fake)
    ctl.configure(CONFIG)
    writes: list[tuple[str, str]] = []
    write = fake.write

    def spy(path: Path, data: str) -> None:
        writes.append((path.name, data))
        write(path, data)

    fake.write = spy  # type: ignore[method-assign]
    fake.exited.add(3)
    assert ctl.assign("gold", [1, 3, 2])
    assert writes == [("tasks", "1\n"), ("tasks", "3\n"), ("tasks", "2\n")]
    assert read(fake.root / "gold" / "tasks") == "1\n2\n"
    assert read(fake.root / "tasks") == "3\n"  # moved out of the root group
    assert ctl.assign("system/default", [2])
    assert read(fake.root / "tasks") == "3\n2\n"


def test_assign_cgroup_takes_every_thread_v1_and_v2(fake_resctrl: Make, tmp_path: Path) -> None:
    fake = fake_resctrl(SHAPE)
    ctl = controller(fake)
    ctl.configure(CONFIG)
    v2 = make_v2(tmp_path / "v2", "/kubepods/burstable/pod1", "c1", threads=(11, 12, 13))
    assert ctl.assign_cgroup("Burstable", v2, explicit=False)
    assert read(fake.root / "Burstable" / "tasks") == "11\n12\n13\n"
    v1 = make_v1(tmp_path / "v1", "/kubepods/pod2", "c2", threads=(21, 22))
    assert ctl.assign_cgroup("gold", v1)
    assert read(fake.root / "gold" / "tasks") == "21\n22\n"
    assert ctl.assign_cgroup("gold", tmp_path / "gone")  # the container has exited


def test_task_cgroup_dir(tmp_path: Path) -> None:
    from enforcer.controllers.cgroups import task_cgroup_dir, task_ids

    v2 = make_v2(tmp_path / "v2", "/kubepods/pod1", "c1", threads=(5, 6))
    assert task_cgroup_dir("/kubepods/pod1", "c1", str(tmp_path / "v2")) == str(v2)
    assert task_ids(v2) == [5, 6]
    v1 = make_v1(tmp_path / "v1", "/kubepods/pod1", "c1", threads=(7,))
    assert task_cgroup_dir("/kubepods/pod1", "c1", str(tmp_path / "v1")) == str(v1)
    assert task_ids(v1) == [7]


def test_kernel_refusals_become_apply_errors(fake_resctrl: Make) -> None:
    fake = fake_resctrl(ResctrlShape(l3=CacheShape(cbm_mask=0x7FF, num_closids=4)))
    for name in ("other1", "other2"):  # another tool's groups use up CLOS ids
        fake.mkdir(fake.root / name)
        fake.write(fake.root / name / "tasks", "1\n")
    with pytest.raises(ApplyError, match=r"resctrl refused mkdir .*/b: .*Out of CLOSIDs"):
        controller(fake).configure(rdt({"p": {"classes": {"a": {}, "b": {}}}}))
    # The info files claim a wider mask than the cache takes: the kernel's reason is shown.
    liar = fake_resctrl(ResctrlShape(l3=CacheShape(cbm_mask=0x7FF)))
    (liar.root / "info" / "L3" / "cbm_mask").write_text("fffff\n")
    with pytest.raises(
        ApplyError, match=r"schemata: Invalid argument \(Mask out of range: fffff\)"
    ):
        controller(liar).configure(rdt({"p": {"classes": {"a": {}}}}))


def test_configuration_that_does_not_fit_is_refused_before_any_write(fake_resctrl: Make) -> None:
    fake = fake_resctrl(ResctrlShape(l3=CacheShape(cbm_mask=0x7FF, num_closids=4)))
    ctl = controller(fake)
    too_many = rdt({"p": {"classes": {f"c{i}": {} for i in range(5)}}})
    with pytest.raises(ConfigError, match="at most 3 classes"):
        ctl.plan(too_many)
    with pytest.raises(ConfigError, match="at most 3 classes"):
        ctl.configure(too_many)
    assert fake.groups() == []
    assert not ctl.available


# -- refusals for containers ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["..", ".", "../etc", "a/b", "/abs", "", "-x", "x" * 64, "gold\n", "système"]
)
def test_malformed_names_are_refused(fake_resctrl: Make, name: str) -> None:
    ctl = controller(fake_resctrl(SHAPE))
    ctl.configure(CONFIG)
    with pytest.raises(InvalidClassName, match="is malformed: it must match"):
        ctl.assign(name, [1])
    with pytest.raises(InvalidClassName):
        ctl.assign(name, [1], explicit=False)
    with pytest.raises(InvalidClassName):
        ctl.group_dir(name)


def test_a_group_folder_may_not_lead_out_of_the_resctrl_root(
    fake_resctrl: Make, tmp_path: Path
) -> None:
    fake = fake_resctrl(SHAPE)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (fake.root / "gold").symlink_to(elsewhere)
    ctl = controller(fake)
    with pytest.raises(InvalidClassName, match='"gold"'):
        ctl.configure(CONFIG)
    assert list(elsewhere.iterdir()) == []


def test_unknown_classes(fake_resctrl: Make) -> None:
    ctl = controller(fake_resctrl(SHAPE))
    ctl.configure(CONFIG)
    with pytest.raises(UnknownClass) as err:
        ctl.assign("platinum", [1])
    assert str(err.value) == (
        'rdt class "platinum" is not configured; configured rdt classes: Burstable, gold, silver'
    )
    # A QoS-class default that is not configured is skipped quietly.
    assert ctl.assign("BestEffort", [1], explicit=False) is False
    # The same answers without moving anything, for CreateContainer.
    assert ctl.check("gold") and ctl.check("gold", explicit=False)
    assert ctl.check("BestEffort", explicit=False) is False
    with pytest.raises(UnknownClass):
        ctl.check("platinum")
    with pytest.raises(InvalidClassName):
        ctl.check("../x", explicit=False)


def test_rdt_unavailable(tmp_path: Path) -> None:
    ctl = ResctrlGroups(tmp_path / "no-resctrl")
    warnings = ctl.configure(CONFIG)
    assert warnings == [
        f"rdt: RDT is not available: no resctrl filesystem is mounted at {tmp_path}/no-resctrl "
        f"({tmp_path}/no-resctrl/info is missing); RDT classes will be refused when asked for "
        "explicitly"
    ]
    assert not ctl.available
    assert ctl.classes == {"gold", "silver", "Burstable", "system/default"}
    with pytest.raises(RdtUnavailable) as err:
        ctl.assign("gold", [1])
    assert isinstance(err.value, ClassUnavailable)
    assert str(err.value).startswith('RDT class "gold" cannot be applied: RDT is not available')
    assert ctl.assign("Burstable", [1], explicit=False) is False  # the QoS default: quietly
    assert ctl.check("Burstable", explicit=False) is False
    with pytest.raises(RdtUnavailable):
        ctl.check("gold")
    with pytest.raises(UnknownClass):  # still told apart from an unknown class
        ctl.assign("platinum", [1])
    with pytest.raises(RdtUnavailable):
        ctl.plan(CONFIG)
    # Without an rdt section nothing is configured at all.
    assert ctl.configure(None) == []
    with pytest.raises(UnknownClass):
        ctl.assign("gold", [1])


@pytest.mark.parametrize("name", ["info", "mon_groups", "mon_data", "tasks", "schemata"])
def test_the_kernels_own_names_are_never_class_groups(fake_resctrl: Make, name: str) -> None:
    # The last guard: the configuration and the annotations refuse these names first.
    ctl = controller(fake_resctrl(SHAPE))
    ctl.configure(CONFIG)
    with pytest.raises(InvalidClassName, match="reserved by the kernel in resctrl"):
        ctl.group_dir(name)
    with pytest.raises(InvalidClassName, match="reserved"):
        ctl.assign(name, [1])
