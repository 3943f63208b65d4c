"""The webhook's log lines on stderr, in the format both programs share
(`resource_contract.logformat`): one JSON object per line with the fields each event carries,
or text."""

from __future__ import annotations

import logging
from typing import Any

from resource_contract.logformat import FORMATS, install

__all__ = ["FORMATS", "LEVELS", "setup_logging"]

LEVELS = ("debug", "info", "warning", "error")


def setup_logging(level: str = "info", stream: Any = None, fmt: str = "json") -> None:
    """Everything, uvicorn's own messages included, through one handler (json or text)."""
    install(level, fmt, stream)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        lg = logging.getLogger(name)
        lg.handlers.clear()
        lg.propagate = True
