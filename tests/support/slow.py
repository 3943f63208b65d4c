"""Deadlines of the real-component tests, stretched on a slow machine (the test VM).

``KRE_TIMEOUT_SCALE`` (default 1) multiplies every deadline that passes through ``scaled``: the
cgroup v2 VM (tests/vm/) runs the same end-to-end modules under QEMU's software emulation, where
Python starts some 50 times slower than here. Tests still wait for conditions, never for time.
"""

from __future__ import annotations

import os


def scale() -> float:
    """The factor from ``KRE_TIMEOUT_SCALE`` (at least 1; a bad value counts as 1)."""
    try:
        return max(1.0, float(os.environ.get("KRE_TIMEOUT_SCALE", "1")))
    except ValueError:
        return 1.0


def scaled(seconds: float) -> float:
    """``seconds`` times the factor."""
    return seconds * scale()
