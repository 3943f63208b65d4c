"""The cgroup v2 VM, booted once for tests/vm (tests.support.vm; image built and cached by
tests/beds/vm/build.sh). A VM that cannot be built or booted fails the tests that need it, never
skips them: leave them out with ``pytest -m "not vm"``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.vm import VM, VMError, say


@pytest.fixture(scope="session")
def vm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VM]:
    start = time.monotonic()
    try:
        booted = VM.up(Path(tmp_path_factory.mktemp("vm")))
    except VMError as e:
        pytest.fail(f"the cgroup v2 VM is needed: {e}", pytrace=False)
    say(f"tests/vm: image and boot took {time.monotonic() - start:.0f} s")
    try:
        yield booted
    finally:
        booted.down()
