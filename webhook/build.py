"""What build this is: the installed distribution's version (`--version`, the build_info metric)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _distribution_version

DISTRIBUTION = "kube-resource-enforcer"


def version() -> str:
    try:
        return _distribution_version(DISTRIBUTION)
    except PackageNotFoundError:  # a source tree that was never installed
        return "unknown"
