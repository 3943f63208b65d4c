"""The relay's end-to-end tests once more, against containerd 1.7 (NRI on, no plugin
registered): `resource-enforcer run` keeps working on the runtime the NRI plugin needs. The
tests are tests/e2e/test_enforcer_static.py's own, with `containerd` standing for the private
containerd 1.7."""

from __future__ import annotations

import pytest

from tests.e2e.test_enforcer_static import (  # noqa: F401 - fixtures and tests, run here again
    enforcer,
    kubelet,
    test_containerd_restart_under_the_relay,
    test_exclusive_cpu_and_shared_pool_follow_each_other,
    test_kubelets_update_keeps_the_pinning,
    test_no_cpu_left_fails_with_resource_exhausted,
    test_passthrough_calls_answer_as_the_runtime,
    test_reconfiguration_moves_what_no_longer_fits,
    test_status_shows_containers_and_the_cpu_map,
)
from tests.support.containerd17 import NriContainerd


@pytest.fixture(scope="module")
def containerd(containerd17: NriContainerd) -> NriContainerd:
    assert containerd17.version().runtime_version.startswith("1.7.")
    return containerd17
