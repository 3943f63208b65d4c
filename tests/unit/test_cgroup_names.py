"""Where a container's cgroup is, for each CRI runtime of the matrix: containerd's CRI plugin
names it ``<parent>/<id>`` (``cri-containerd-<id>.scope`` under a systemd slice), CRI-O
``<parent>/crio-<id>`` (``crio-<id>.scope``). The CRI-O examples are what a running CRI-O 1.34.0
handed runc here (the ``linux.cgroupsPath`` of its ContainerStatus' runtimeSpec, cgroupfs
manager) and, for the systemd manager, what cri-o's internal/config/cgmgr gives runc
(``<slice>:crio:<id>``, which runc's systemd driver makes ``<slice path>/crio-<id>.scope``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from enforcer.controllers.cgroups import cgroup_path, container_cgroup_candidates

UID = "d1ae8b96-6666-4851-808c-07147a64ea48"
CID = "5b0c7e3f64b1d6c0ad9f3be1a63a0d2c2a2f4bbcf61d5e28f6a1c3b0d9e8f7a6"
SLICE = "kubepods-burstable-podd1ae8b96_6666_4851_808c_07147a64ea48.slice"
SLICE_PATH = (
    "/kubepods.slice/kubepods-burstable.slice/"
    "kubepods-burstable-podd1ae8b96_6666_4851_808c_07147a64ea48.slice"
)


def test_containerd_names_come_first_cri_o_names_second() -> None:
    parent = f"/kubepods/pod{UID}"
    assert container_cgroup_candidates(parent, CID) == (
        f"/kubepods/pod{UID}/{CID}",
        f"/kubepods/pod{UID}/crio-{CID}",
    )
    assert container_cgroup_candidates(SLICE, CID) == (
        f"{SLICE_PATH}/cri-containerd-{CID}.scope",
        f"{SLICE_PATH}/crio-{CID}.scope",
    )


@pytest.mark.parametrize(
    ("parent", "cgroups_path"),
    [
        # cgroupfs manager, as CRI-O 1.34.0 handed runc here (Guaranteed, then BestEffort).
        (f"/kubepods/pod{UID}", f"/kubepods/pod{UID}/crio-{CID}"),
        (f"/kubepods/besteffort/pod{UID}", f"/kubepods/besteffort/pod{UID}/crio-{CID}"),
        # a parent given with a trailing slash names the same folder
        (f"/kubepods/burstable/pod{UID}/", f"/kubepods/burstable/pod{UID}/crio-{CID}"),
    ],
)
def test_cri_o_cgroupfs_names_are_candidates(parent: str, cgroups_path: str) -> None:
    assert cgroups_path in container_cgroup_candidates(parent, CID)


def test_cri_o_systemd_scope_is_a_candidate() -> None:
    # cgmgr.SystemdManager.ContainerCgroupPath: "<slice>:crio:<id>"; runc: <prefix>-<id>.scope
    slice_name, prefix, name = f"{SLICE}:crio:{CID}".split(":")
    assert f"{SLICE_PATH}/{prefix}-{name}.scope" in container_cgroup_candidates(slice_name, CID)


def _mkdir(root: Path, rel: str) -> Path:
    folder = root / rel.lstrip("/")
    folder.mkdir(parents=True)
    return folder


def test_the_folder_that_exists_is_the_containers(tmp_path: Path) -> None:
    parent = f"/kubepods/pod{UID}"
    crio = _mkdir(tmp_path / "cpuset", f"{parent}/crio-{CID}")
    # CRI-O's conmon has its own folder beside the container's: never taken for it.
    _mkdir(tmp_path / "cpuset", f"{parent}/crio-conmon-{CID}")
    assert cgroup_path("cpuset", parent, CID, str(tmp_path)) == str(crio)
    scope = _mkdir(tmp_path, f"{SLICE_PATH}/crio-{CID}.scope")
    assert cgroup_path(None, SLICE, CID, str(tmp_path)) == str(scope)


def test_containerd_name_when_none_exists_or_both_do(tmp_path: Path) -> None:
    parent = f"/kubepods/pod{UID}"
    expected = str(tmp_path / "memory" / f"kubepods/pod{UID}/{CID}")
    assert cgroup_path("memory", parent, CID, str(tmp_path)) == expected
    _mkdir(tmp_path / "memory", f"{parent}/crio-{CID}")
    _mkdir(tmp_path / "memory", f"{parent}/{CID}")
    assert cgroup_path("memory", parent, CID, str(tmp_path)) == expected
