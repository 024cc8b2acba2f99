"""Logging set-up for the ``spate`` command: one ``key=value`` line per event.

Only the CLI configures logging; the library only logs. Each line carries ``ts``,
``level``, ``logger`` and ``msg``, then any structured fields passed through ``extra=``
(``pipeline=... partition=...``), then ``exc=`` for an exception. Values with spaces,
quotes or ``=`` are double-quoted with escapes, so lines stay machine-parseable.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from typing import TextIO

from spate._secrets import redact

LEVELS = ("debug", "info", "warning", "error", "critical")

# Attributes every LogRecord has; anything else came from ``extra=``.
_STANDARD = frozenset(
    vars(logging.LogRecord("n", logging.INFO, "p", 1, "m", None, None)).keys()
) | {"message", "asctime", "taskName"}

# Libraries whose own lines repeat what spate reports itself with the endpoint and the
# outcome (a failed ClickHouse write: urllib3's "Retrying ...", clickhouse-connect's
# "Unexpected Http Driver Exception"; httpx's line per request): below ``debug`` only
# their lines at these levels and above are shown.
THIRD_PARTY_LEVELS = {
    "urllib3": logging.ERROR,
    "clickhouse_connect": logging.ERROR,
    "httpx": logging.WARNING,
    "httpcore": logging.WARNING,
}

_BARE = re.compile(r"^[A-Za-z0-9_.:/@+\-\[\],]+$")


def quote(value: object) -> str:
    """``value`` as a ``key=value`` value: bare when safe, else a quoted string."""
    text = str(value)
    if text and _BARE.match(text):
        return text
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


class KeyValueFormatter(logging.Formatter):
    """Formats a record as ``ts=... level=... logger=... msg="..." key=value ...``."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        parts = [
            f"ts={stamp}.{int(record.msecs):03d}Z",
            f"level={record.levelname.lower()}",
            f"logger={record.name}",
            f"msg={quote(record.getMessage())}",
        ]
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                parts.append(f"{key}={quote(value)}")
        if record.exc_info:
            parts.append(f"exc={quote(self.formatException(record.exc_info))}")
        return redact(" ".join(parts))  # no secret in any log line (B67)


def configure_logging(
    level: str = "info", stream: TextIO | None = None
) -> logging.StreamHandler[TextIO]:
    """Send every log record at ``level`` and above to ``stream`` (stderr) as key=value.

    Below ``debug``, the libraries in :data:`THIRD_PARTY_LEVELS` show only their errors
    (httpx and httpcore their warnings): spate logs the same events once, with the
    endpoint and what happens next."""
    if level.lower() not in LEVELS:
        raise ValueError(f"unknown log level {level!r} (expected one of {', '.join(LEVELS)})")
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(KeyValueFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, "_spate_cli", False):
            root.removeHandler(old)
    handler._spate_cli = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name, quiet in THIRD_PARTY_LEVELS.items():
        logging.getLogger(name).setLevel(logging.NOTSET if level.lower() == "debug" else quiet)
    return handler
