"""An fsynced, append-only file sink that several processes can share.

Each sealed batch becomes JSON lines (one per row) written with a single ``os.write`` on
a file descriptor opened with ``O_APPEND`` — so lines from several processes never
interleave inside a line — followed by ``os.fsync``; only then are the batch's acks
released as delivered. What a test reads back with :func:`read_file_sink` after a
``kill -9`` is therefore a superset of everything any process ever acknowledged, which
is what the multi-process delivery tests assert against (docs/development.md, B1, B14).

A torn last line (a process killed in the middle of a write) is skipped by the reader.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path

from spate._clock import Clock
from spate.errors import SinkError
from spate.flow._contract import ByteBudget
from spate.testing._buffered import Attempt, BufferedSink, SealedBatch

logger = logging.getLogger(__name__)


def _jsonable(value: object) -> object:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "backslashreplace")
    raise TypeError(f"file sink rows must be JSON values, got {type(value).__name__}")


def _json_line(row: object) -> bytes:
    """One JSON line; ``bytes`` values are written as UTF-8 text."""
    return (
        json.dumps(row, separators=(",", ":"), sort_keys=True, default=_jsonable).encode() + b"\n"
    )


class FileSink(BufferedSink):
    """Implements ``Sink``; appends JSON lines to ``path`` and fsyncs before acking."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        name: str = "sink",
        *,
        max_rows: int = 100,
        capacity: int | None = None,
        row_bytes: int = 64,
        budget: ByteBudget | None = None,
        clock: Clock | None = None,
        threaded: bool = False,
        encode: Callable[[object], bytes] = _json_line,
    ) -> None:
        super().__init__(
            name,
            max_rows=max_rows,
            capacity=capacity,
            row_bytes=row_bytes,
            budget=budget,
            clock=clock,
            threaded=threaded,
        )
        self.path = Path(path)
        self._encode = encode
        self._fd: int | None = None
        self.rows_written = 0

    def start(self) -> None:
        try:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:
            raise SinkError(f"file sink {self.name}: cannot open {self.path}: {exc}") from exc
        super().start()

    def _attempt(self, batch: SealedBatch) -> Attempt:
        fd = self._fd
        if fd is None:
            return "retry"
        data = b"".join(self._encode(r.row) for r in batch.rows)
        try:
            written = os.write(fd, data)
            if written != len(data):
                # Regular files take whole writes; a short write means the disk is full.
                logger.error("file sink %s: short write (%d of %d)", self.name, written, len(data))
                return "fatal"
            os.fsync(fd)
        except OSError:
            logger.exception("file sink %s: write failed", self.name)
            return "retry"
        self.rows_written += len(batch.rows)
        return "ok"

    def close(self) -> None:
        super().close()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def read_file_sink(path: str | os.PathLike[str]) -> list[object]:
    """Every complete JSON line in ``path`` (a torn last line is skipped)."""
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        return []
    lines = raw.split(b"\n")
    # The element after the last newline is empty or a torn line: skip it.
    return [json.loads(line) for line in lines[:-1] if line]
