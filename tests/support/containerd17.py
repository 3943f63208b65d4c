"""A private containerd 1.7 with NRI on, beside the system's containerd 1.6.

``.ci/containerd17.sh`` extracts Debian trixie's containerd package (1.7.24, NRI API v0.6.1)
under ``/var/cache/kube-resource-enforcer/containerd-1.7`` (``KRE_CONTAINERD17_ROOT`` moves it).
The instance itself is the matrix's ``NriContainerd`` (tests.support.runtimes), whose default
release is 1.7; the names here are kept for the tests that ask for 1.7 by name.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.runtimes import RELEASES, NriContainerd

__all__ = ["NriContainerd", "containerd17_available", "containerd17_bin_dir"]


def containerd17_bin_dir() -> Path:
    """Where the extracted containerd 1.7 programs are."""
    found = RELEASES["containerd1.7"].bin_dir()
    assert found is not None
    return found


def containerd17_available() -> str | None:
    """None when a private containerd 1.7 can run here, else the reason why not."""
    return RELEASES["containerd1.7"].unavailable()
