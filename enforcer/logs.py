"""The daemon's log lines on stderr, in the format both programs share
(`resource_contract.logformat`)."""

from __future__ import annotations

from typing import TextIO

from resource_contract.logformat import FORMATS, install

__all__ = ["FORMATS", "setup_logging"]


def setup_logging(level: str, fmt: str = "text", stream: TextIO | None = None) -> None:
    """Every logger through one handler on stderr, in `fmt` (json or text)."""
    install(level, fmt, stream)
