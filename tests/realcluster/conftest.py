"""A real single-node Kubernetes per mode (tests/support/cluster/): kubelet, the API server and
the rest built from upstream, the webhook and the enforcer from the images, deployed with
`deploy/`. The ``cluster`` fixture is session-scoped and parametrized by mode (``nri``,
``relay``): pytest runs every test of one mode on one cluster, takes it down, then the other.

``KRE_CLUSTER=.cluster`` runs the tests on a cluster that `make cluster-up` left running
(select its mode: ``-k nri`` or ``-k relay``) and leaves it up.

Nothing here skips: a failed build or a cluster that does not come up fails the tests (CI, and
a developer who selected them). Leave them out explicitly with ``pytest -m "not cluster"``.
kubelet owns the host's ``kubepods`` cgroups while the cluster runs: run these tests alone, or
under the shared lock (``flock /tmp/kre-real.lock pytest tests/realcluster``).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cluster.bed import Cluster
from tests.support.cluster.layout import MODES, REPO
from tests.support.cluster.procs import ClusterError

timings: dict[str, float] = {}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.cluster)


def _unavailable() -> str | None:
    if os.geteuid() != 0:
        return "the cluster needs root (kubelet, containerd, cgroups, the CNI bridge)"
    missing = [t for t in ("go", "gcc", "podman", "iptables", "ip") if shutil.which(t) is None]
    if not Path("/usr/lib/cni/bridge").exists():
        missing.append("containernetworking-plugins (/usr/lib/cni/bridge)")
    if missing:
        return f"missing {', '.join(missing)} (.ci/system-deps.sh installs all but Go 1.26)"
    return None


@pytest.fixture(scope="session", params=MODES)
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    mode: str = request.param
    running = os.environ.get("KRE_CLUSTER")
    if running:  # a cluster left up by `make cluster-up`: used as it is, never taken down
        c = Cluster.attach(Path(running))
        if c.mode != mode:
            pytest.fail(f"{running} runs MODE={c.mode}; select its tests with -k {c.mode}")
        yield c
        return
    reason = _unavailable()
    if reason:
        pytest.fail(f"the cluster cannot run here: {reason}", pytrace=False)
    root = Path(os.environ.get("KRE_CLUSTER_TEST_DIR", str(REPO / ".cluster-test")))
    c = Cluster(mode, root)
    started = time.monotonic()
    try:
        c.up()
    except (ClusterError, RuntimeError) as e:
        pytest.fail(f"the {mode} cluster did not come up: {e}", pytrace=False)
    timings[f"cluster up ({mode})"] = time.monotonic() - started
    for step, secs in c.timings.items():
        timings[f"  {mode}: {step}"] = secs
    tests_started = time.monotonic()
    try:
        yield c
    finally:
        timings[f"tests on the {mode} cluster"] = time.monotonic() - tests_started
        t = time.monotonic()
        problems = c.down()
        timings[f"cluster down ({mode})"] = time.monotonic() - t
        if problems:
            pytest.fail(f"cluster-down left things behind: {problems}", pytrace=False)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not timings:
        return
    terminalreporter.section("cluster")
    for step, seconds in timings.items():
        terminalreporter.write_line(f"{step}: {seconds:.1f} s")
