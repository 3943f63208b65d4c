"""Why the enforcer cannot start: ``StartError``, which `run` logs and exits 1 for."""

from __future__ import annotations


class StartError(Exception):
    pass
