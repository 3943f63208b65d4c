"""The daemon's log lines on stderr, in the format both programs share
(`resource_contract.logformat`)."""

from __future__ import annotations

import logging
import sys
from typing import TextIO

from resource_contract.logformat import FORMATS, formatter

__all__ = ["FORMATS", "setup_logging"]


def setup_logging(level: str, fmt: str = "text", stream: TextIO | None = None) -> None:
    """Every logger through one handler on stderr, in `fmt` (json or text)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(formatter(fmt))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
