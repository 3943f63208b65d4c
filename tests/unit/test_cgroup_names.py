"""Where a container's cgroup is, for each CRI runtime of the matrix: containerd's CRI plugin
names it ``<parent>/<id>`` (``cri-containerd-<id>.scope`` under a systemd slice), CRI-O
``<parent>/crio-<id>`` (``crio-<id>.scope``). UID and CID are a Guaranteed pod's and its
container's as a running CRI-O 1.34.0 (cgroupfs manager) made them here, in
/sys/fs/cgroup/cpuset/kubepods/pod<UID>/crio-<CID>; for the systemd manager, what cri-o's
internal/config/cgmgr gives runc (``<slice>:crio:<id>``, which runc's systemd driver makes
``<slice path>/crio-<id>.scope``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from enforcer.controllers.cgroups import cgroup_path, container_cgroup_candidates

UID = "e40f2eb6-896c-40d3-a13f-916cecf87f33"
CID = "2e0b74469c778750c6313343e9ac1d52d7d1d8a9ee5b3b5fd3f7870bc271e1e5"
SLICE = "kubepods-burstable-pode40f2eb6_896c_40d3_a13f_916cecf87f33.slice"
SLICE_PATH = (
    "/kubepods.slice/kubepods-burstable.slice/"
    "kubepods-burstable-pode40f2eb6_896c_40d3_a13f_916cecf87f33.slice"
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
        # cgroupfs manager: the Guaranteed container CRI-O 1.34.0 ran here, then the same rule
        # under the BestEffort and Burstable parents.
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
