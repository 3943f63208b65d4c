"""A real single-node Kubernetes per mode (tests/support/cluster/): kubelet, the API server and
the rest built from upstream, the webhook and the enforcer from the images, deployed with
`deploy/`. The ``cluster`` fixture is session-scoped and parametrized by mode (``nri``,
``relay``) on containerd 2.x, then NRI mode on CRI-O (``crio-nri``): pytest runs
every test of one cluster, takes it down, then the next. On CRI-O run only the modules marked
``crio_cluster`` (the placement and its truth: `make cluster-up RUNTIME=crio` works as the
default does); the rest of the suite is the runtime's business, not the cluster's, and the
relay's and the plugin's end-to-end modules already run on CRI-O (tests/e2e, tests/nri).

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

# The clusters, in the order they come up: (mode, runtime) by its test id. On CRI-O the NRI
# mode only: each cluster costs about 2.5 min here (CRI-O's images are copied in with skopeo),
# and the relay's path to CRI-O is the relay's end-to-end modules' (tests/e2e, [crio1.34]).
CLUSTERS = {
    **{mode: (mode, "containerd") for mode in MODES},
    "crio-nri": ("nri", "crio"),
}

timings: dict[str, float] = {}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    kept, dropped = [], []
    for item in items:
        if "cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.cluster)
            callspec = getattr(item, "callspec", None)
            on = callspec.params.get("cluster") if callspec else None
            if (
                on
                and CLUSTERS[on][1] != "containerd"
                and not item.get_closest_marker("crio_cluster")
            ):
                dropped.append(item)
                continue
        kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def _unavailable(runtime: str) -> str | None:
    if os.geteuid() != 0:
        return "the cluster needs root (kubelet, containerd, cgroups, the CNI bridge)"
    missing = [t for t in ("go", "gcc", "podman", "iptables", "ip") if shutil.which(t) is None]
    if not Path("/usr/lib/cni/bridge").exists():
        missing.append("containernetworking-plugins (/usr/lib/cni/bridge)")
    if missing:
        return f"missing {', '.join(missing)} (.ci/system-deps.sh installs all but Go 1.26)"
    if runtime == "crio":
        from tests.support.crio import crio_available

        return crio_available()
    return None


@pytest.fixture(scope="session", params=list(CLUSTERS))
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    name: str = request.param
    mode, runtime = CLUSTERS[name]
    running = os.environ.get("KRE_CLUSTER")
    if running:  # a cluster left up by `make cluster-up`: used as it is, never taken down
        c = Cluster.attach(Path(running))
        if (c.mode, c.runtime) != (mode, runtime):
            ids = [k for k, v in CLUSTERS.items() if v == (c.mode, c.runtime)]
            pytest.fail(
                f"{running} runs MODE={c.mode} RUNTIME={c.runtime}; "
                + (f"select its tests with -k {ids[0]}" if ids else "the suite has no such cluster")
            )
        yield c
        return
    reason = _unavailable(runtime)
    if reason:
        pytest.fail(f"the cluster cannot run here: {reason}", pytrace=False)
    root = Path(os.environ.get("KRE_CLUSTER_TEST_DIR", str(REPO / ".cluster-test")))
    c = Cluster(mode, root, runtime=runtime)
    started = time.monotonic()
    try:
        c.up()
    except (ClusterError, RuntimeError) as e:
        pytest.fail(f"the {name} cluster did not come up: {e}", pytrace=False)
    timings[f"cluster up ({name})"] = time.monotonic() - started
    for step, secs in c.timings.items():
        timings[f"  {name}: {step}"] = secs
    tests_started = time.monotonic()
    try:
        yield c
    finally:
        timings[f"tests on the {name} cluster"] = time.monotonic() - tests_started
        t = time.monotonic()
        problems = c.down()
        timings[f"cluster down ({name})"] = time.monotonic() - t
        if problems:
            pytest.fail(f"cluster-down left things behind: {problems}", pytrace=False)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not timings:
        return
    terminalreporter.section("cluster")
    for step, seconds in timings.items():
        terminalreporter.write_line(f"{step}: {seconds:.1f} s")
