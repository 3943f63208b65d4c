"""Block-I/O classes applied to container cgroups: stand-in v2 and v1 folders laid out as the
kernel does, and this machine's real cgroup v1 blkio hierarchy with its disk."""

from __future__ import annotations

import contextlib
import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ctl_support import need

from enforcer.configuration import parse_config
from enforcer.controllers.blockio import (
    BlockIOCgroups,
    blockio_cgroup_dir,
    read_cgroup_io,
)
from enforcer.controllers.errors import BlockIOUnavailable, InvalidClassName, UnknownClass
from tests.support.fake_cgroup import make_v1, make_v2

Disk = tuple[str, int, int]
PARENT = "/kubepods/burstable/pod0f1e2d3c"


def controller(classes: dict[str, Any], root: str | Path = "/sys/fs/cgroup") -> BlockIOCgroups:
    ctl = BlockIOCgroups(root)
    assert ctl.configure(parse_config({"blockio": {"Classes": classes}}).blockio) == []
    return ctl


def slow(disk: Disk) -> dict[str, Any]:
    return {
        "slow": [
            {"Weight": 200},
            {
                "Devices": [disk[0]],
                "Weight": 300,
                "ThrottleReadBps": "50M",
                "ThrottleWriteBps": "10Mi",
                "ThrottleReadIOPS": "1k",
                "ThrottleWriteIOPS": 500,
            },
        ],
        "fast": [{"Weight": 1000}],
    }


# -- where the folder is ---------------------------------------------------------------------------


def test_cgroup_dir_v1_v2_and_systemd(tmp_path: Path) -> None:
    make_v2(tmp_path / "v2", PARENT, "abc")
    assert blockio_cgroup_dir(PARENT, "abc", str(tmp_path / "v2")) == tmp_path / f"v2{PARENT}/abc"
    make_v1(tmp_path / "v1", PARENT, "abc")
    assert blockio_cgroup_dir(PARENT, "abc", str(tmp_path / "v1")) == (
        tmp_path / f"v1/blkio{PARENT}/abc"
    )
    assert blockio_cgroup_dir("kubepods-besteffort-pod1_2.slice", "abc", str(tmp_path / "v1")) == (
        tmp_path / "v1/blkio/kubepods.slice/kubepods-besteffort.slice/"
        "kubepods-besteffort-pod1_2.slice/cri-containerd-abc.scope"
    )


def test_the_kubelet_emulator_uses_the_same_cgroup_paths() -> None:
    from enforcer.controllers.cgroups import cgroup_path
    from tests.support import kubelet

    assert kubelet.cgroup_path is cgroup_path


# -- a v2 folder -----------------------------------------------------------------------------------


def test_v2_folder_gets_io_max_and_io_weight(disk: Disk, tmp_path: Path) -> None:
    folder = make_v2(tmp_path, PARENT, "c1")
    assert read_cgroup_io(folder).version == 2
    result = controller(slow(disk), tmp_path).apply("slow", PARENT, "c1")
    assert result.applied and result.folder == folder
    key = f"{disk[1]}:{disk[2]}"
    # Initial content, then each line written (the stand-in appends).
    assert (folder / "io.weight").read_text() == f"default 100\ndefault 1920\n{key} 2930\n"
    assert (folder / "io.max").read_text() == (
        f"{key} rbps=50000000 wbps=10485760 riops=1000 wiops=500\n"
    )
    assert result.warnings == ()


def test_v2_with_bfq_uses_io_bfq_weight(disk: Disk, tmp_path: Path) -> None:
    folder = make_v2(tmp_path, PARENT, "c1", bfq=True)
    controller(slow(disk), tmp_path).apply("slow", PARENT, "c1")
    key = f"{disk[1]}:{disk[2]}"
    assert (folder / "io.bfq.weight").read_text() == f"default 100\ndefault 200\n{key} 300\n"
    assert (folder / "io.weight").read_text() == "default 100\n"


def test_v2_without_the_io_controller(tmp_path: Path) -> None:
    make_v2(tmp_path, PARENT, "c1", io=False)
    ctl = controller({"fast": [{"Weight": 1000}]}, tmp_path)
    with pytest.raises(BlockIOUnavailable, match=r'"fast" cannot be applied: the io controller'):
        ctl.apply("fast", PARENT, "c1")
    assert ctl.apply("fast", PARENT, "c1", explicit=False).applied is False


def test_v1_stand_in_folder(disk: Disk, tmp_path: Path) -> None:
    folder = make_v1(tmp_path, PARENT, "c1")
    cgroup = read_cgroup_io(folder)
    assert (cgroup.version, cgroup.weight_file, cgroup.bfq) == (1, "blkio.bfq.weight", True)
    controller(slow(disk), tmp_path).apply_dir("slow", folder)
    key = f"{disk[1]}:{disk[2]}"
    assert (folder / "blkio.bfq.weight").read_text() == "100\n200\n"
    assert (folder / "blkio.throttle.read_bps_device").read_text() == f"{key} 50000000\n"


def test_refusals(tmp_path: Path) -> None:
    make_v2(tmp_path, PARENT, "c1")
    ctl = controller({"fast": [{"Weight": 1000}]}, tmp_path)
    for name in ("..", "../x", "a/b", ""):
        with pytest.raises(InvalidClassName, match="blockio class name"):
            ctl.apply(name, PARENT, "c1")
    with pytest.raises(UnknownClass, match='blockio class "slow" is not configured; configured '):
        ctl.apply("slow", PARENT, "c1")
    assert ctl.apply("Burstable", PARENT, "c1", explicit=False).applied is False
    assert ctl.check("fast") and ctl.check("Burstable", explicit=False) is False
    with pytest.raises(UnknownClass):
        ctl.check("slow")
    with pytest.raises(InvalidClassName):
        ctl.check("a/b", explicit=False)
    with pytest.raises(BlockIOUnavailable, match="cannot read cgroup folder"):
        ctl.apply("fast", PARENT, "missing")
    (tmp_path / "plain").mkdir()
    with pytest.raises(BlockIOUnavailable, match="is not a blkio"):
        ctl.apply_dir("fast", tmp_path / "plain")


# -- this machine's cgroup v1 blkio ----------------------------------------------------------------

BLKIO = Path("/sys/fs/cgroup/blkio")


@pytest.fixture
def blkio_parent() -> Iterator[str]:
    """A test cgroup parent in the real blkio hierarchy, removed afterwards."""
    need(os.geteuid() == 0, "needs root to make cgroups")
    need(BLKIO.is_dir(), "no cgroup v1 blkio hierarchy at /sys/fs/cgroup/blkio")
    parent = f"/kre-test-{uuid.uuid4().hex[:12]}"
    top = BLKIO / parent.lstrip("/")
    top.mkdir()
    (top / "c1").mkdir()
    try:
        yield parent
    finally:
        with contextlib.suppress(FileNotFoundError):
            (top / "c1").rmdir()
        top.rmdir()


def throttles(folder: Path) -> dict[str, str]:
    return {
        name: (folder / f"blkio.throttle.{name}_device").read_text()
        for name in ("read_bps", "write_bps", "read_iops", "write_iops")
    }


def scheduler(disk: Disk) -> str:
    text = Path(f"/sys/dev/block/{disk[1]}:{disk[2]}/queue/scheduler").read_text()
    found = re.search(r"\[([^\]]+)\]", text)
    assert found, text
    return found.group(1)


@contextlib.contextmanager
def without_bfq(disk: Disk) -> Iterator[None]:
    """The disk on a scheduler other than bfq for the test; the previous one put back."""
    sched = Path(f"/sys/dev/block/{disk[1]}:{disk[2]}/queue/scheduler")
    previous = scheduler(disk)
    others = [s.strip("[]") for s in sched.read_text().split() if s.strip("[]") != "bfq"]
    need(bool(others), "an I/O scheduler other than bfq for the disk")
    try:
        if previous == "bfq":
            sched.write_text(others[0])
        yield
    finally:
        sched.write_text(previous)


def test_real_v1_throttles_and_weights(disk: Disk, blkio_parent: str) -> None:
    with without_bfq(disk):
        check_throttles_and_unsupported_weights(disk, blkio_parent)


def check_throttles_and_unsupported_weights(disk: Disk, blkio_parent: str) -> None:
    ctl = controller(slow(disk))
    result = ctl.apply("slow", blkio_parent, "c1")
    folder = BLKIO / blkio_parent.lstrip("/") / "c1"
    assert result.applied and result.folder == folder
    key = f"{disk[1]}:{disk[2]}"
    assert throttles(folder) == {
        "read_bps": f"{key} 50000000\n",
        "write_bps": f"{key} 10485760\n",
        "read_iops": f"{key} 1000\n",
        "write_iops": f"{key} 500\n",
    }
    # The cgroup's own weight is bfq's setting and takes; the device's needs bfq on the disk.
    assert (folder / "blkio.bfq.weight").read_text() == "200\n"
    assert len(result.warnings) == 1
    assert result.warnings[0].startswith(
        f"blockio: weight not applied: {folder}/blkio.bfq.weight_device <- '{key} 300': "
    )
    assert result.warnings[0].endswith(
        f"the device uses the {scheduler(disk)} I/O scheduler; weights need bfq"
    )
    # Re-applied as another class (a reload): the limits it does not set are removed.
    assert ctl.apply("fast", blkio_parent, "c1").warnings == ()
    assert throttles(folder) == {"read_bps": "", "write_bps": "", "read_iops": "", "write_iops": ""}
    assert (folder / "blkio.bfq.weight").read_text() == "1000\n"


def test_real_v1_device_weight_with_bfq(disk: Disk, blkio_parent: str) -> None:
    sched = Path(f"/sys/dev/block/{disk[1]}:{disk[2]}/queue/scheduler")
    need("bfq" in sched.read_text(), "the bfq I/O scheduler is not available for the disk")
    previous = scheduler(disk)
    try:
        sched.write_text("bfq")
        ctl = controller(slow(disk))
        result = ctl.apply("slow", blkio_parent, "c1")
        folder = BLKIO / blkio_parent.lstrip("/") / "c1"
        key = f"{disk[1]}:{disk[2]}"
        assert result.warnings == ()
        # The "default" line mirrors the cgroup's weight (blkio.bfq.weight).
        assert (folder / "blkio.bfq.weight_device").read_text() == f"default 200\n{key} 300\n"
        ctl.apply("fast", blkio_parent, "c1")  # no device weight: reset with "default"
        assert (folder / "blkio.bfq.weight_device").read_text() == "default 1000\n"
    finally:
        sched.write_text(previous)
    assert scheduler(disk) == previous
