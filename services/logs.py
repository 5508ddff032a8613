"""Logging setup: human text on a terminal, one JSON object per line for collectors."""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime

import orjson

__all__ = ["setup_logging"]


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
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # aiokafka logs every reconnect attempt at ERROR; our retry loop already reports them.
    logging.getLogger("aiokafka").setLevel(max(logging.WARNING, root.level))
