"""Shared fixtures.

``containerd16`` (also ``containerd``): a private containerd 1.6, the system's
(tests.support.containerd), for the whole session. Tests that use it are marked ``containerd``
automatically. Where containerd, runc or busybox are
missing the fixture FAILS, it never skips: a skipped end-to-end test would look like a pass
in CI. On a machine without them, leave those tests out explicitly with
``pytest -m "not containerd"``.

``containerd17``: a private containerd 1.7 with NRI on (tests.support.containerd17), for the
NRI plugin's tests, marked ``containerd`` too. Missing (``.ci/containerd17.sh`` not run), it
fails as the 1.6 one does, naming the command that installs it.

tests/e2e/conftest.py overrides ``containerd`` there: the relay's end-to-end modules run once on
each runtime (1.6 and 1.7).

``snapshot_roots`` / ``topologies``: the real servers' sysfs snapshots, extracted once.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from enforcer.topology import Topology, read_topology
from tests.support.containerd import ContainerdError, PrivateContainerd, containerd_available
from tests.support.containerd17 import NriContainerd, containerd17_available
from tests.support.snapshots import extract_snapshots


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Anything that needs the fixture needs a real containerd: mark it so `-m` can select it.
    for item in items:
        names = getattr(item, "fixturenames", ())
        if {"containerd", "containerd16", "containerd17"} & set(names):
            item.add_marker(pytest.mark.containerd)


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


@pytest.fixture(scope="session")
def containerd17() -> Iterator[NriContainerd]:
    reason = containerd17_available()
    if reason:
        pytest.fail(
            f"containerd 1.7 with NRI is needed: {reason}. Install it with "
            '.ci/containerd17.sh, or run `pytest -m "not containerd"`.',
            pytrace=False,
        )
    ctrd = NriContainerd()
    try:
        ctrd.start()
    except ContainerdError as e:
        ctrd.close()
        pytest.fail(f"private containerd 1.7 did not start: {e}", pytrace=False)
    try:
        yield ctrd
    finally:
        ctrd.close()


@pytest.fixture(scope="session")
def snapshot_roots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Snapshot name -> the extracted folder to pass as sysfs root."""
    return extract_snapshots(tmp_path_factory.mktemp("sysfs-snapshots"))


@pytest.fixture(scope="session")
def topologies(snapshot_roots: dict[str, Path]) -> dict[str, Topology]:
    return {name: read_topology(path) for name, path in snapshot_roots.items()}
