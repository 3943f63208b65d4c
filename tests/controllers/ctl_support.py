"""Helpers shared by the controller tests (a unique module name: tests have no packages)."""

from __future__ import annotations

import pytest


def need(condition: bool, reason: str) -> None:
    """Fails (never skips) when this machine lacks a prerequisite: a skipped test would pass
    for a green run. On a machine without it, deselect the test explicitly."""
    if not condition:
        pytest.fail(f"this test needs {reason}; deselect it on machines without", pytrace=False)
