"""The cpuset controller reads a container's CPUs and memory nodes on cgroup v2 (one unified
tree, ``cpuset.cpus.effective``: an empty ``cpuset.cpus`` means inherited) as on v1, on a fake
tree laid out as the kernel's (tests/support/fake_cgroup.py)."""

from __future__ import annotations

from pathlib import Path

from enforcer.controllers.base import Target
from enforcer.controllers.cpuset import CgroupCpusets, CpusetController
from enforcer.decode import ContainerRequest
from tests.support.fake_cgroup import make_v2, set_v2_cpuset

PARENT = "/kubepods/pod1234"
NODE_CPUS, NODE_MEMS = "0-3", "0-1"
REQUEST = ContainerRequest("1234", "p", "default", "app", "Burstable")


def target(cpus: str, mems: str) -> Target:
    return Target("c1", PARENT, REQUEST, cpus, mems)


def v2(tmp_path: Path, cpus: str, mems: str) -> CpusetController:
    folder = make_v2(tmp_path, PARENT, "c1")
    set_v2_cpuset(folder, cpus, mems, node_cpus=NODE_CPUS, node_mems=NODE_MEMS)
    return CpusetController(CgroupCpusets(str(tmp_path)))


def test_a_pinned_container_reads_what_is_in_effect(tmp_path: Path) -> None:
    ctl = v2(tmp_path, "2-3", "1")
    assert ctl.read(target("2-3", "1")) == ("2-3", "1")
    assert ctl.verify(target("2-3", "1")) is None
    found = ctl.verify(target("1", "0"))
    assert found is not None and found.by_runtime and found.seen == ("2-3", "1")


def test_a_container_with_no_cpuset_of_its_own_has_its_parents(tmp_path: Path) -> None:
    # v2 leaves cpuset.cpus empty when nobody wrote one: the container runs on every CPU.
    ctl = v2(tmp_path, "", "")
    assert ctl.read(target(NODE_CPUS, NODE_MEMS)) == (NODE_CPUS, NODE_MEMS)
    assert ctl.verify(target(NODE_CPUS, NODE_MEMS)) is None
    wrong = ctl.verify(target("1-3", NODE_MEMS))
    assert wrong is not None and "has cpus=0-3" in wrong.detail


def test_a_container_whose_cgroup_is_gone_reads_nothing(tmp_path: Path) -> None:
    ctl = v2(tmp_path, "1", "0")
    gone = Target("c2", PARENT, REQUEST, "1", "0")
    assert ctl.read(gone) is None and ctl.verify(gone) is None
