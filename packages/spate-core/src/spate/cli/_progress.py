"""The progress bar of ``spate run`` on a terminal, for a source with a known end.

Drawn only when stderr is a terminal, the source reports progress — in its own unit
through :class:`~spate.source.ProgressSource` (the S3 backfill: bytes of the job), or as
records left through :class:`~spate.source.BoundedSource` (a bounded Kafka run, a memory
source) — and ``rich`` is installed, an optional dependency of the CLI
(``spate-core[progress]``); the library never imports it. Log lines keep flowing: while
the bar is shown the CLI's log handler writes through rich's console, which prints them
above the bar. Without any of the three, nothing changes: the status line in the log
reports progress instead."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any, TextIO

from spate.metrics import Meter, names
from spate.source import BoundedSource, Progress, ProgressSource

logger = logging.getLogger(__name__)

REFRESH = 0.2
"""Seconds between two readings of the source's progress."""


@contextlib.contextmanager
def progress_bar(
    source: object,
    meter: Meter,
    stream: TextIO,
    handler: logging.StreamHandler[Any] | None,
) -> Iterator[None]:
    """Show a progress bar on ``stream`` while the body runs, when it can be shown.

    A :class:`ProgressSource` says done and total itself, in its unit. For a
    :class:`BoundedSource`, done is what the source handed out
    (``spate_source_records_total`` of ``meter``), the total that plus what it says remains.
    """
    tracker: _Tracker
    if isinstance(source, ProgressSource):
        tracker = _Tracker(source.progress)
    elif isinstance(source, BoundedSource):
        tracker = _Tracker(
            _records(
                source.remaining,
                lambda: int(sum(meter.totals(names.SOURCE_RECORDS, "lane").values())),
            )
        )
    else:
        yield
        return
    if not _is_terminal(stream):
        yield
        return
    try:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TaskProgressColumn,
            TextColumn,
            TimeRemainingColumn,
        )
    except ImportError:
        logger.debug("no progress bar: rich is not installed (pip install rich)")
        yield
        return
    console = Console(file=stream)
    progress = Progress(
        TextColumn("{task.fields[unit]}"),
        BarColumn(),
        TaskProgressColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    )
    task = progress.add_task("progress", total=None, unit=tracker.unit)
    stop = threading.Event()

    def refresh() -> None:
        while True:
            done, total = tracker.read()
            progress.update(task, completed=done, total=total, unit=tracker.unit)
            if stop.wait(REFRESH):
                return

    previous = handler.setStream(_ConsoleWriter(console)) if handler is not None else None
    thread = threading.Thread(target=refresh, name="spate-progress", daemon=True)
    with progress:
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(timeout=5)
            done, total = tracker.read()  # the last reading: the bar ends where the run did
            progress.update(task, completed=done, total=total, unit=tracker.unit)
            if handler is not None and previous is not None:
                handler.setStream(previous)


def _records(
    remaining: Callable[[], int | None], handed_out: Callable[[], int]
) -> Callable[[], Progress | None]:
    """A :class:`BoundedSource` as progress in records: handed out, and that plus what
    remains (None while the remaining count is unknown)."""

    def read() -> Progress | None:
        done = handed_out()
        left = remaining()
        return None if left is None else Progress(done, done + left, "records")

    return read


class _Tracker:
    """Turns the source's progress readings into what the bar shows: (done, total).

    The total never shrinks (readings are not taken at one instant), and done never
    moves back nor passes the total, so the bar never moves backwards; partitions or
    splits whose size becomes known later raise the total.
    """

    def __init__(self, read: Callable[[], Progress | None]) -> None:
        self._read = read
        self._done = 0
        self._total: int | None = None
        self.unit = "records"

    def read(self) -> tuple[int, int | None]:
        try:
            reading = self._read()
        except Exception:  # a display must never fail the run
            logger.debug("reading the source's progress failed", exc_info=True)
            return self._done, self._total
        if reading is not None:
            self.unit = reading.unit
            self._total = max(self._total or 0, reading.total)
            self._done = max(self._done, min(reading.done, self._total))
        return self._done, self._total


class _ConsoleWriter:
    """A text stream for the log handler that prints through rich's console."""

    def __init__(self, console: Any) -> None:
        self._console = console

    def write(self, text: str) -> int:
        if text.strip():
            self._console.print(text.rstrip("\n"), markup=False, highlight=False, soft_wrap=True)
        return len(text)

    def flush(self) -> None:
        pass


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
