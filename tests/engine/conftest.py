"""Fixtures of the engine tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.engine.restore_support import Runtime, create, make
from tests.support.pods import guaranteed


@pytest.fixture
def saved(tmp_path: Path) -> tuple[Path, Runtime]:
    """A state folder holding three containers, and the runtime they run in."""
    runtime = Runtime()
    e = make(tmp_path / "state", runtime)
    e.reconciled = True
    create(e, runtime, "first", guaranteed("1"))
    create(e, runtime, "second", guaranteed("1"))
    create(e, runtime, "third")
    e.persist()
    return tmp_path / "state", runtime
