"""Shared fixtures.

``containerd16`` (also ``containerd``): a private containerd 1.6, the system's
(tests.support.containerd), for the whole session. Tests that use it are marked ``containerd``
automatically. Where containerd, runc or busybox are
missing the fixture FAILS, it never skips: a skipped end-to-end test would look like a pass
in CI. On a machine without them, leave those tests out explicitly with
``pytest -m "not containerd"``.

``containerd17``, ``containerd21``, ``containerd24``: a private containerd of the matrix with NRI
on (tests.support.runtimes), marked ``containerd`` too; ``crio134``: a private CRI-O 1.34 with
NRI on (tests.support.crio: its own storage, run root and sockets, cgroupfs, images pulled from
a loopback registry), marked ``containerd`` as well (a real runtime). Missing (its installer
not run), each fails as the 1.6 one does, naming the command that installs it.
``tests.support.runtimes.session_runtime`` gives the session's instance of a release by its test
id (``containerd2.1``).

tests/e2e/conftest.py overrides ``containerd`` there: the relay's end-to-end modules run once on
each runtime of the matrix; tests/nri/conftest.py runs the NRI plugin's modules on each runtime
that has NRI.

``snapshot_roots`` / ``topologies``: the real servers' sysfs snapshots, extracted once.

A failed test's report is also printed the moment it fails (``pytest_runtest_logreport``), past
the capture: a run stopped before its summary (a CI timeout, a SIGINT) still shows what failed.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from enforcer.sysfs import read_topology
from enforcer.topology import Topology
from tests.support.containerd import ContainerdError, PrivateContainerd, containerd_available
from tests.support.runtimes import RELEASES, NriContainerd, private_runtime
from tests.support.snapshots import extract_snapshots
from tests.support.vm_background import BACKGROUND, Background


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Anything that needs the fixture needs a real containerd: mark it so `-m` can select it.
    for item in items:
        names = getattr(item, "fixturenames", ())
        if any(n.startswith(("containerd", "crio")) for n in names):
            item.add_marker(pytest.mark.containerd)
    # tests/vm last: the VM boots and runs its subset in the background meanwhile (below).
    items.sort(key=lambda item: item.get_closest_marker("vm") is not None)


# A failure's report printed at once keeps its last lines; the summary prints it whole.
FAILURE_TAIL_CHARS = 6000


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not report.failed:
        return
    text = report.longreprtext
    if len(text) > FAILURE_TAIL_CHARS:
        text = "[...]" + text[-FAILURE_TAIL_CHARS:]
    print(
        f"\n[failed now] {report.nodeid} ({report.when}):\n{text}", file=sys.__stderr__, flush=True
    )


def pytest_collection_finish(session: pytest.Session) -> None:
    """With a tests/vm test selected, the VM's boot and in-VM run start now, in the background
    (tests.support.vm_background), and tests/vm's fixtures wait for them. Not in the VM's own
    session (``KRE_IN_VM``)."""
    config = session.config
    if (
        config.option.collectonly
        or os.environ.get("KRE_IN_VM")
        or not any(i.get_closest_marker("vm") for i in session.items)
    ):
        return
    background = Background()
    config.stash[BACKGROUND] = background
    config.add_cleanup(background.close)
    background.start()


@pytest.fixture(scope="session")
def containerd16() -> Iterator[PrivateContainerd]:
    reason = containerd_available()
    if reason:
        pytest.fail(
            f"a real containerd is needed: {reason}. "
            'On a machine without it, run `pytest -m "not containerd"`.',
            pytrace=False,
        )
    ctrd = PrivateContainerd()
    try:
        ctrd.start()
    except ContainerdError as e:
        ctrd.close()
        pytest.fail(f"private containerd did not start: {e}", pytrace=False)
    try:
        yield ctrd
    finally:
        ctrd.close()


@pytest.fixture(scope="session")
def containerd(containerd16: PrivateContainerd) -> PrivateContainerd:
    return containerd16


def _nri_runtime(name: str) -> Iterator[NriContainerd]:
    release = RELEASES[name]
    reason = release.unavailable()
    if reason:
        pytest.fail(
            f"{name} with NRI is needed: {reason}. Install it with {release.installer}, "
            'or run `pytest -m "not containerd"`.',
            pytrace=False,
        )
    ctrd = private_runtime(release)
    try:
        ctrd.start()
    except ContainerdError as e:
        ctrd.close()
        pytest.fail(f"private {name} did not start: {e}", pytrace=False)
    try:
        yield ctrd
    finally:
        ctrd.close()


@pytest.fixture(scope="session")
def containerd17() -> Iterator[NriContainerd]:
    yield from _nri_runtime("containerd1.7")


@pytest.fixture(scope="session")
def containerd21() -> Iterator[NriContainerd]:
    yield from _nri_runtime("containerd2.1")


@pytest.fixture(scope="session")
def containerd24() -> Iterator[NriContainerd]:
    yield from _nri_runtime("containerd2.4")


@pytest.fixture(scope="session")
def crio134() -> Iterator[NriContainerd]:
    yield from _nri_runtime("crio1.34")


@pytest.fixture(scope="session")
def snapshot_roots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Snapshot name -> the extracted folder to pass as sysfs root."""
    return extract_snapshots(tmp_path_factory.mktemp("sysfs-snapshots"))


@pytest.fixture(scope="session")
def topologies(snapshot_roots: dict[str, Path]) -> dict[str, Topology]:
    return {name: read_topology(path) for name, path in snapshot_roots.items()}
