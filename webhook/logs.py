"""The webhook's log lines on stderr, in the format both programs share
(`resource_contract.logformat`): one JSON object per line with the fields each event carries,
or text."""

from __future__ import annotations

import logging
import sys
from typing import Any

from resource_contract.logformat import FORMATS, formatter

__all__ = ["FORMATS", "LEVELS", "setup_logging"]

LEVELS = ("debug", "info", "warning", "error")


def setup_logging(level: str = "info", stream: Any = None, fmt: str = "json") -> None:
    """Everything, uvicorn's own messages included, through one handler (json or text)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(formatter(fmt))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        lg = logging.getLogger(name)
        lg.handlers.clear()
        lg.propagate = True
