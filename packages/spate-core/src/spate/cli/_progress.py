"""The progress bar of ``spate run`` on a terminal, for a source with a known end.

Drawn only when stderr is a terminal, the source implements
:class:`~spate.source.BoundedSource` (a bounded Kafka run, a memory source) and ``rich``
is installed — an optional dependency of the CLI (``spate-core[progress]``); the
library never imports it. Log lines keep flowing: while the bar is shown the CLI's log
handler writes through rich's console, which prints them above the bar. Without any of
the three, nothing changes: the status line in the log reports progress instead.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any, TextIO

from spate.metrics import Meter, names
from spate.source import BoundedSource

logger = logging.getLogger(__name__)

REFRESH = 0.2
"""Seconds between two readings of the source's remaining count."""


@contextlib.contextmanager
def progress_bar(
    source: object,
    meter: Meter,
    stream: TextIO,
    handler: logging.StreamHandler[Any] | None,
) -> Iterator[None]:
    """Show a progress bar on ``stream`` while the body runs, when it can be shown.

    Done is what the source handed out (``spate_source_records_total`` of ``meter``),
    the total that plus what the source says remains.
    """
    if not isinstance(source, BoundedSource) or not _is_terminal(stream):
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
        TextColumn("records"),
        BarColumn(),
        TaskProgressColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    )
    task = progress.add_task("records", total=None)
    tracker = _Tracker(
        source.remaining, lambda: int(sum(meter.totals(names.SOURCE_RECORDS, "lane").values()))
    )
    stop = threading.Event()

    def refresh() -> None:
        while True:
            done, total = tracker.read()
            progress.update(task, completed=done, total=total)
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
            progress.update(task, completed=done, total=total)
            if handler is not None and previous is not None:
                handler.setStream(previous)


class _Tracker:
    """Turns "records handed out" and "records remaining" readings into (done, total).

    The total never shrinks (the two readings are not taken at the same instant), so the
    bar never moves backwards; partitions whose position becomes known later raise it.
    """

    def __init__(self, remaining: Callable[[], int | None], done: Callable[[], int]) -> None:
        self._remaining = remaining
        self._polled = done
        self._total: int | None = None

    def read(self) -> tuple[int, int | None]:
        try:
            done = self._polled()
            left = self._remaining()
        except Exception:  # a display must never fail the run
            logger.debug("reading the source's progress failed", exc_info=True)
            return 0, self._total
        if left is not None:
            self._total = max(self._total or 0, done + left)
        if self._total is not None:
            done = min(done, self._total)
        return done, self._total


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
