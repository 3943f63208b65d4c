"""The controllers behind one interface, as the engine drives them: a configuration refused by
one controller writes nothing through another; the periodic sweep finds tasks of a container
left outside its RDT class (forked before the move) and moves them; a cpuset that drifted is
repaired through the runtime. resctrl is a faithful fake (this machine has none); the cgroup
folder is a stand-in with the kernel's `tasks` format."""

from __future__ import annotations

from pathlib import Path

import pytest

from enforcer.configuration import parse_config
from enforcer.controllers.base import Roots
from enforcer.controllers.cpuset import CpusetController
from enforcer.controllers.group import Controllers
from enforcer.controllers.rdt import ResctrlGroups
from enforcer.controllers.rdt.lifecycle import RdtClasses
from enforcer.controllers.registry import CONFIG_CHECKS, CONTROLLER_TYPES, node_controllers
from enforcer.engine import Enforcer
from enforcer.engine.kubelet_record import KubeletRecord
from resource_contract.config import ConfigError
from tests.engine.standins import MACHINE, Clock, FailingStore, StandInRuntime, create_of
from tests.support.fake_resctrl import FakeResctrl

RDT = {"rdt": {"partitions": {"p1": {"classes": {"BestEffort": {}, "gold": {}}}}}}


def test_every_controller_is_registered_once_with_its_checks(tmp_path: Path) -> None:
    names = [t.name for t in CONTROLLER_TYPES]
    assert names == ["cpuset", "rdt", "blockio", "cpuclass", "scheduling", "memory", "irq"]
    assert len(CONFIG_CHECKS) == len(names)
    built = node_controllers(Roots(cgroupfs=None, sysfs=None, resctrl=None), MACHINE)
    assert [c.name for c in built] == names
    with pytest.raises(ValueError, match="registered twice"):
        Controllers([CpusetController(None), CpusetController(None)])


def test_a_configuration_one_controller_refuses_writes_nothing(tmp_path: Path) -> None:
    fake = FakeResctrl(tmp_path / "resctrl")
    controllers = Controllers(
        [
            CpusetController(None, topology=MACHINE),
            RdtClasses(
                ResctrlGroups(fake.root, fs=fake, mount_options=fake.mount_options),
                cgroupfs_root=str(tmp_path / "cgroup"),
                checks_root=True,
            ),
        ]
    )
    # CPU 9 is not on this 4-CPU machine: the cpuset controller refuses before RDT writes.
    bad = parse_config({**RDT, "policy": {"name": "static", "reservedCPUs": "9"}})
    with pytest.raises(ConfigError, match=r"policy\.reservedCPUs"):
        controllers.configure(bad)
    assert fake.groups() == []
    controllers.configure(parse_config(RDT))
    assert sorted(fake.groups()) == ["BestEffort", "gold"]


def _tasks(path: Path) -> set[int]:
    return {int(t) for t in path.read_text().split()}


def test_sweep_moves_tasks_left_outside_their_rdt_class(tmp_path: Path) -> None:
    fake = FakeResctrl(tmp_path / "resctrl")
    cgroupfs = tmp_path / "cgroup"
    runtime = StandInRuntime()
    config = parse_config({**RDT, "policy": {"name": "static", "reservedCPUs": "0"}})
    controllers = Controllers(
        [
            CpusetController(runtime),
            RdtClasses(
                ResctrlGroups(fake.root, fs=fake, mount_options=fake.mount_options),
                cgroupfs_root=str(cgroupfs),
                checks_root=True,
            ),
        ]
    )
    controllers.configure(config)
    store = FailingStore(tmp_path / "state")
    store.ensure_dir()
    clock = Clock()
    e = Enforcer(
        topology=MACHINE,
        config=config,
        store=store,
        runtime=runtime,
        controllers=controllers,
        clock=clock,
    )
    e.reconciled = True
    create = create_of("batch")  # BestEffort: RDT class BestEffort by its QoS class
    key, pinning = e.create(create, sandbox_id="sandbox", resources=KubeletRecord())
    runtime.add("cid-batch", key)
    runtime.cpus["cid-batch"] = pinning.cpus or "0-3"
    folder = cgroupfs / "cpuset" / create.cgroup_parent.strip("/") / "cid-batch"
    folder.mkdir(parents=True)
    (folder / "tasks").write_text("101\n102\n")
    e.created(key, "cid-batch")
    e.started("cid-batch")
    group = fake.root / "BestEffort" / "tasks"
    assert _tasks(group) == {101, 102}

    # A child forked by 102 before the move stayed in the default group.
    (folder / "tasks").write_text("101\n102\n103\n")
    applied = e.metrics.class_applications.labels("rdt", "BestEffort", "applied")
    before = applied._value.get()
    clock.now += config.verify.periodSeconds
    e.maintain()
    assert _tasks(group) == {101, 102, 103}
    assert 103 not in _tasks(fake.root / "tasks")
    assert applied._value.get() == before + 1
    assert next(v for v in e.views() if v.pod == "batch").problem is None

    # And the cpuset, changed behind the engine's back, is put back through the runtime.
    decided = runtime.cpus["cid-batch"]
    runtime.cpus["cid-batch"] = "0"
    clock.now += config.verify.periodSeconds
    e.maintain()
    assert runtime.cpus["cid-batch"] == decided != "0"
    assert runtime.updates[-1] == ("cid-batch", decided)
