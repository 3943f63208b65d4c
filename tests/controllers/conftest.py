"""Fixtures for the RDT and block-I/O controllers: fake resctrl trees of several shapes, and
the machine's own block device and cgroup v1 blkio hierarchy for the tests that use them."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # ctl_support, whatever pytest's import mode

from ctl_support import need

from tests.support.disks import whole_disk
from tests.support.fake_resctrl import FakeResctrl, ResctrlShape


@pytest.fixture
def fake_resctrl(tmp_path: Path) -> Callable[..., FakeResctrl]:
    """fake_resctrl(shape) -> a FakeResctrl tree in its own folder."""
    count = 0

    def make(shape: ResctrlShape | None = None) -> FakeResctrl:
        nonlocal count
        count += 1
        return FakeResctrl(tmp_path / f"resctrl{count}", shape)

    return make


@pytest.fixture(scope="session")
def disk() -> tuple[str, int, int]:
    """A whole-disk block device of this machine: (path, major, minor); /dev/vda here."""
    found = whole_disk()
    need(found is not None, "no whole-disk block device (/dev/vda, /dev/sda, ...) on this machine")
    assert found is not None
    return found
