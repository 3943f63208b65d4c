"""The cgroup v2 VM for tests/vm: booted, and the end-to-end subset run in it, in the background
from the session's start (tests.support.vm_background, started by tests/conftest.py); the
fixtures wait for it. The VM node of test_vm_dra.py is made in the same VM once the subset has
run (one boot per session). A VM that cannot be built or booted, or a run that dies, fails the tests
that need it with its log, never skips them: leave them out with ``pytest -m "not vm"``."""

from __future__ import annotations

import pytest

from tests.support.vm import VM
from tests.support.vm_background import BACKGROUND, Background, VMBackgroundError


@pytest.fixture(scope="session")
def background(request: pytest.FixtureRequest) -> Background:
    found = request.config.stash.get(BACKGROUND, None)
    if found is None:
        pytest.fail("the VM's background run was not started (tests/conftest.py)", pytrace=False)
    return found


@pytest.fixture(scope="session")
def vm(background: Background) -> VM:
    try:
        return background.wait_booted()
    except VMBackgroundError as e:
        pytest.fail(f"the cgroup v2 VM is needed: {e}", pytrace=False)
