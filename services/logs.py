"""Logging setup: human text on a terminal, one JSON object per line for collectors."""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime

import orjson

__all__ = ["TextFormatter", "setup_logging"]

#: Characters that could start a new line or rewrite one on a terminal, escaped in
#: text logs: a label key or pod name from input can then never forge a log line.
_CONTROL = {
    **{i: f"\\x{i:02x}" for i in (*range(32), 0x7F, 0x85)},
    0x0A: "\\n",
    0x0D: "\\r",
    0x09: "\t",  # a tab stays a tab
    0x2028: "\\u2028",
    0x2029: "\\u2029",
}


class TextFormatter(logging.Formatter):
    """``time level logger: message``, the message's control characters escaped
    (a traceback, added after it, keeps its lines)."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        message = record.message
        if not message.isprintable():
            record.message = message.translate(_CONTROL)
        try:
            return super().formatMessage(record)
        finally:
            record.message = message


class JsonFormatter(logging.Formatter):
    """Structured log lines: time, level, logger, message, and any ``extra`` fields."""

    _skip = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        out.update({k: v for k, v in record.__dict__.items() if k not in self._skip})
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(out, default=str).decode()


def setup_logging(level: str = "info", fmt: str = "text") -> None:
    """Configure the root logger once, to stderr (stdout is for command output)."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(TextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # aiokafka logs every reconnect attempt at ERROR; our retry loop already reports them.
    logging.getLogger("aiokafka").setLevel(max(logging.WARNING, root.level))
