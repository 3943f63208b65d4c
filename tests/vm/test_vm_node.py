"""The cgroup v2 VM is the node the brief asks for, read from its kernel: the unified hierarchy
only, 2 sockets x 1 core x 2 SMT threads, 2 NUMA nodes, BFQ on its virtio disks."""

from __future__ import annotations

import pytest

from tests.support.vm import VM

pytestmark = pytest.mark.vm


def test_the_vm_mounts_cgroup_v2_only_with_the_controllers_the_enforcer_uses(vm: VM) -> None:
    mounts = [line.split() for line in vm.read("/proc/mounts").splitlines()]
    kinds = {fields[2] for fields in mounts if fields[1].startswith("/sys/fs/cgroup")}
    assert kinds == {"cgroup2"}, kinds
    controllers = set(vm.read("/sys/fs/cgroup/cgroup.controllers").split())
    assert {"cpuset", "cpu", "memory", "io", "pids"} <= controllers


def test_the_kernel_sees_two_sockets_two_numa_nodes_and_smt_threads(vm: VM) -> None:
    cpu = "/sys/devices/system/cpu"
    listing = vm.exec(
        f"for c in {cpu}/cpu[0-9]*; do echo $(basename $c) "
        "$(cat $c/topology/physical_package_id) $(cat $c/topology/thread_siblings_list); done",
        check=True,
    ).stdout.split("\n")
    rows = {f[0]: (f[1], f[2]) for f in (line.split() for line in listing) if f}
    assert rows == {
        "cpu0": ("0", "0-1"),
        "cpu1": ("0", "0-1"),
        "cpu2": ("1", "2-3"),
        "cpu3": ("1", "2-3"),
    }
    node = "/sys/devices/system/node"
    assert vm.read(f"{node}/node0/cpulist").strip() == "0-1"
    assert vm.read(f"{node}/node1/cpulist").strip() == "2-3"
    assert vm.read(f"{node}/possible").strip() == "0-1"


def test_the_virtio_disks_offer_bfq(vm: VM) -> None:
    for disk in ("vda", "vdb"):
        assert "bfq" in vm.read(f"/sys/block/{disk}/queue/scheduler").replace("[", " ").split()
