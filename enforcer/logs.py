"""The daemon's log lines on stderr: one JSON object per line, or plain text.

JSON lines carry the same fields as the webhook's (`webhook/logs.py`; the two programs share no
code, and a test holds them to the same names): "time" (UTC, ISO 8601, milliseconds), "level",
"logger", "msg", the record's `fields` where it has any, and "exc" with an exception's trace.
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


def setup_logging(level: str, fmt: str = "text", stream: TextIO | None = None) -> None:
    """Every logger through one handler on stderr, in `fmt` (json or text)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JSONFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
