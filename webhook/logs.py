"""Log lines on stderr: one JSON object per line with the fields each event carries, or text.

JSON lines carry the same fields as the enforcer's (`enforcer/logs.py`; the two programs share
no code, and a test holds them to the same names).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
from typing import Any

LEVELS = ("debug", "info", "warning", "error")
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


def setup_logging(level: str = "info", stream: Any = None, fmt: str = "json") -> None:
    """Everything, uvicorn's own messages included, through one handler (json or text)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JSONFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        lg = logging.getLogger(name)
        lg.handlers.clear()
        lg.propagate = True
