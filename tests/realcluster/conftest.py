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

A module whose subject does not depend on how the enforcer reaches the runtime (the webhook's
admission and certificate rotation, the configuration and NodeResourceTopology through the API
server) carries the mark ``one_mode``: it runs on whichever cluster the selection brings up, the
first of ``MODES`` when both are selected (``-k relay`` runs it on the relay's). Everything that
goes through the relay or the NRI plugin (placement, re-pinning, restarts, resize, DRA, kubelet's
CPU manager, the node's reboot, device locality, the webhook down) runs on both (the relay's
runs of the three modules took 52 s of the last whole run).

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

ORDER = list(CLUSTERS)
timings: dict[str, float] = {}
# kubelet's exits that the bed's supervisor restarted it after, by cluster: shown in the summary
# (on a node systemd does the same; the relay mode meets such an exit when kubelet dials the
# relay path in the instant between an enforcer's stop and its fallback link).
kubelet_exits: dict[str, list[str]] = {}
ONE_MODE = "one_mode"


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


def _mode(item: pytest.Item) -> str | None:
    callspec = getattr(item, "callspec", None)
    mode = callspec.params.get("cluster") if callspec is not None else None
    return mode if isinstance(mode, str) else None


def one_mode(items: list[pytest.Item]) -> tuple[list[pytest.Item], list[pytest.Item]]:
    """The selected items with each ``one_mode`` test kept in one mode only (the first of
    the clusters among those selected), and the items left out."""
    chosen: dict[tuple[object, ...], str] = {}
    for item in items:
        mode = _mode(item)
        if mode is None or item.get_closest_marker(ONE_MODE) is None:
            continue
        key = _key(item)
        if key not in chosen or ORDER.index(mode) < ORDER.index(chosen[key]):
            chosen[key] = mode
    kept: list[pytest.Item] = []
    left: list[pytest.Item] = []
    for item in items:
        mode = _mode(item)
        if mode is None or item.get_closest_marker(ONE_MODE) is None or chosen[_key(item)] == mode:
            kept.append(item)
        else:
            left.append(item)
    return kept, left


def _key(item: pytest.Item) -> tuple[object, ...]:
    """One test whatever its mode: its file, its function, its other parameters."""
    callspec = getattr(item, "callspec", None)
    others = (
        {} if callspec is None else {k: v for k, v in callspec.params.items() if k != "cluster"}
    )
    name = getattr(item, "originalname", item.name)
    return (item.path, name, tuple(sorted((k, repr(v)) for k, v in others.items())))


class _OneMode:
    """Runs after ``-k`` and ``-m`` have deselected (``trylast``), so that what a selection
    leaves of a ``one_mode`` test runs in the mode selected."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        kept, left = one_mode(items)
        if left:
            config.hook.pytest_deselected(items=left)
            items[:] = kept


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_OneMode(), "realcluster-one-mode")


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
    exits_before = len(c.kubelet_exits())  # the logs stay from earlier runs
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
        if exits := c.kubelet_exits()[exits_before:]:
            kubelet_exits[name] = exits
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
    for name, exits in kubelet_exits.items():
        terminalreporter.write_line(
            f"kubelet exited on its own {len(exits)} times on the {name} cluster, and was "
            "started again by the bed's supervisor (tests/beds/cluster/supervise.sh):"
        )
        for line in exits:
            terminalreporter.write_line(f"  {line}")
