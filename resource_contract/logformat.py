"""The log line format both programs write: one JSON object per line, or plain text.

Part of what operators rely on across the two programs: JSON lines carry "time" (UTC, ISO 8601,
milliseconds), "level", "logger", "msg", the record's `fields` where it has any, and "exc"
with an exception's trace; text lines are `TIME LEVEL LOGGER: MSG` with the fields as key=value.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
from typing import Any, TextIO

FORMATS = ("json", "text")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JSONFormatter(logging.Formatter):
    """{"time", "level", "logger", "msg", ...the record's `fields`, "exc" on an exception}."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if fields:
            out.update(fields)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class TextFormatter(logging.Formatter):
    """`TIME LEVEL LOGGER: MSG`, then the record's `fields` as key=value."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = getattr(record, "fields", None)
        if fields:
            line += "".join(f" {k}={json.dumps(v, default=str)}" for k, v in fields.items())
        return line


def formatter(fmt: str) -> logging.Formatter:
    """The formatter for `fmt` (json or text)."""
    return JSONFormatter() if fmt == "json" else TextFormatter()


def install(level: str, fmt: str, stream: TextIO | None = None) -> None:
    """Every logger through one handler (on stderr unless `stream`), in `fmt` (json or text)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(formatter(fmt))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
