"""Block-I/O classes on a real cgroup v2 tree (the VM's): ``io.max`` for the throttles,
``io.bfq.weight`` for the weights with BFQ on the virtio disk, ``io.weight`` without; the
values read back from the kernel's files, including what it does with them (a device weight on a
disk that is not under BFQ is refused, and said so)."""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from enforcer.configuration import parse_config
from enforcer.controllers.blockio import BlockIOCgroups

ROOT = Path("/sys/fs/cgroup")
DISK = "vdb"  # the VM's second, empty virtio disk: its scheduler is ours to change


def disk() -> tuple[str, str]:
    return f"/dev/{DISK}", Path(f"/sys/block/{DISK}/dev").read_text().strip()


def classes(device: str) -> dict[str, Any]:
    return {
        "slow": [
            {"Weight": 200},
            {
                "Devices": [device],
                "Weight": 300,
                "ThrottleReadBps": "50M",
                "ThrottleWriteBps": "10Mi",
                "ThrottleReadIOPS": "1k",
                "ThrottleWriteIOPS": 500,
            },
        ],
        "fast": [{"Weight": 1000}],
    }


def controller(device: str) -> BlockIOCgroups:
    ctl = BlockIOCgroups(str(ROOT))
    assert ctl.configure(parse_config({"blockio": {"Classes": classes(device)}}).blockio) == []
    return ctl


@pytest.fixture
def parent() -> Iterator[str]:
    """A fresh parent cgroup with the io controller on for its child c1 (no process in the
    parent: v2 allows none in an inner node with controllers enabled), as runc makes them: the
    root enables io for its children too (systemd enables only memory and pids)."""
    (ROOT / "cgroup.subtree_control").write_text("+io")
    name = f"/kre-test-{uuid.uuid4().hex[:12]}"
    top = ROOT / name.lstrip("/")
    top.mkdir()
    try:
        (top / "cgroup.subtree_control").write_text("+io")
        (top / "c1").mkdir()
        yield name
    finally:
        with contextlib.suppress(FileNotFoundError):
            (top / "c1").rmdir()
        top.rmdir()


@contextlib.contextmanager
def scheduler(name: str) -> Iterator[None]:
    path = Path(f"/sys/block/{DISK}/queue/scheduler")
    found = re.search(r"\[([^\]]+)\]", path.read_text())
    assert found, path.read_text()
    try:
        path.write_text(name)
        assert f"[{name}]" in path.read_text()
        yield
    finally:
        path.write_text(found.group(1))


def io_max(folder: Path, key: str) -> str:
    return next(
        (
            line
            for line in (folder / "io.max").read_text().splitlines()
            if line.startswith(f"{key} ")
        ),
        "",
    )


def test_throttles_and_weights_with_bfq_on_the_disk(parent: str) -> None:
    device, key = disk()
    folder = ROOT / parent.lstrip("/") / "c1"
    with scheduler("bfq"):
        ctl = controller(device)
        result = ctl.apply("slow", parent, "c1")
        assert result.applied and result.folder == folder and result.warnings == ()
        assert io_max(folder, key) == f"{key} rbps=50000000 wbps=10485760 riops=1000 wiops=500"
        # BFQ's weight file: the cgroup's default and the device's own.
        assert (folder / "io.bfq.weight").read_text() == f"default 200\n{key} 300\n"
        # Another class (a reload): the limits it does not set are lifted, the device's weight
        # goes back to the default.
        assert ctl.apply("fast", parent, "c1").warnings == ()
        assert io_max(folder, key) == ""
        assert (folder / "io.bfq.weight").read_text() == "default 1000\n"


def test_a_device_weight_without_bfq_is_a_warning_and_the_throttles_still_hold(
    parent: str,
) -> None:
    device, key = disk()
    folder = ROOT / parent.lstrip("/") / "c1"
    with scheduler("none"):
        result = controller(device).apply("slow", parent, "c1")
        assert result.applied
        assert io_max(folder, key) == f"{key} rbps=50000000 wbps=10485760 riops=1000 wiops=500"
        assert (folder / "io.bfq.weight").read_text().startswith("default 200\n")
        assert len(result.warnings) == 1 and "weights need bfq" in result.warnings[0], (
            result.warnings
        )
