"""sysfs values read strictly and within bounds: what int() or a blocking read would take."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from enforcer.sysfs import read_topology
from enforcer.topology import TopologyError


@pytest.fixture
def sysfs(snapshot_roots: dict[str, Path], tmp_path: Path) -> Path:
    root = tmp_path / "sysfs"
    shutil.copytree(snapshot_roots["server"], root, symlinks=True)
    return root


@pytest.mark.parametrize("value", ["1_0", "+1", "\u0663", "1 2", "0x1", ""])
def test_an_integer_that_int_would_take_is_refused(sysfs: Path, value: str) -> None:
    path = sysfs / "devices" / "system" / "cpu" / "cpu0" / "topology" / "core_id"
    path.write_text(value + "\n", encoding="utf-8")
    with pytest.raises(TopologyError, match=f"{path}: expected an integer"):
        read_topology(sysfs)


@pytest.mark.parametrize(
    "name", ["cpu/online", "cpu/isolated", "cpu/cpu0/topology/core_id", "node/node0/meminfo"]
)
def test_a_fifo_is_refused_naming_it(sysfs: Path, name: str) -> None:
    path = sysfs / "devices" / "system" / name
    path.unlink(missing_ok=True)
    os.mkfifo(path)
    with pytest.raises(TopologyError, match=f"{path}: cannot read: not a regular file"):
        read_topology(sysfs)


def test_a_huge_value_is_refused_unread(sysfs: Path) -> None:
    path = sysfs / "devices" / "system" / "cpu" / "online"
    path.write_text("0," * (600 << 10))
    with pytest.raises(TopologyError, match=f"{path}: cannot read: larger than 1 MiB"):
        read_topology(sysfs)
