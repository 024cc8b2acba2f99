"""The Hugging Face sink: rows grouped by window, one commit per window (B78).

A row joins the open window of its time (the clock when it arrives, or its
``time_column``) and, within it, the file of its partition: the values of the row
columns the path template names (Hive style, ``station=42/``). The window holds the ack
of every batch it has rows of (``ack.retain(window)``, B39). It is sealed once the
clock passes its end (checked on every checkpoint tick), at ``max_records``, and on
flush (drain, revocation); a sealed window goes to the writer thread, which encodes one
file per partition, names each by a hash of its bytes and the encoder settings, and
sends them all in one commit through the repository's commit gate (B80). The acks are
released delivered only after the Hub answered the commit (B2).

A failed commit is retried after a capped backoff when the failure can pass (transport
errors, timeouts, 429 honouring ``Retry-After``, 5xx, conflicts); when the attempts run
out — or the Hub refused the commit outright (401, 403, 404) — the window's acks are
released failed, so its records stay upstream: in a spool tier, which hands them on
again later in the run (``ack: spooled``, B66) or at its next start, or in the source
(B79). Files are content-addressed, so a commit that
is sent again (a retry after a timeout whose commit did land, a replay from the spool)
writes the same files under the same paths instead of adding copies.
"""

from __future__ import annotations

import collections
import datetime as dt
import logging
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from spate._clock import Clock
from spate.checkpoint._ack import AckToken, release_all
from spate.errors import ErrorClass, ErrorPolicy, SinkError
from spate.records import Lane
from spate.sink import Backoff, Offer
from spate_parquet import RowShaper, parse_schema, safe

from spate_huggingface._encode import FileEncoder, build_encoder
from spate_huggingface._hub import CommitFile, CommitGate, HubClient, HubError, commit_payload
from spate_huggingface.config import HuggingFaceSinkConfig, template_columns

logger = logging.getLogger(__name__)

DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"
"""The directory value of a row whose partition column is missing or null (Hive's)."""

_GroupKey = tuple[tuple[str, ...], tuple[str, ...]]
"""(partition values in template order, the row's columns when inferring a schema)."""


@dataclass(slots=True, eq=False)
class Window:
    """The rows of one window until committed; the holder of their acks, by identity."""

    bucket: int
    groups: dict[_GroupKey, list[dict[str, object]]] = field(default_factory=dict)
    rows: int = 0
    acks: list[AckToken] = field(default_factory=list)
    lanes: set[Lane] = field(default_factory=set)
    settled: bool = False
    """Its acks were released (guarded by the sink's condition lock)."""


@dataclass(slots=True)
class _Job:
    window: Window
    files: list[CommitFile] | None = None
    attempts: int = 0
    not_before: float = 0.0


class HuggingFaceSink:
    """Implements ``Sink``; see the module docstring."""

    def __init__(
        self,
        name: str,
        config: HuggingFaceSinkConfig,
        clock: Clock,
        token: str,
        *,
        io_threads: int = 1,
        encoder: FileEncoder | None = None,
    ) -> None:
        """``token`` is the write token (already registered as a secret); ``encoder``
        replaces the one ``config.encoder`` names."""
        self.name = name
        self.config = config
        self.on_record_error: ErrorPolicy = config.on_record_error
        self._clock = clock
        self._threaded = io_threads > 0
        self._shaper = RowShaper(parse_schema(config.schema))
        self._encoder = (
            encoder if encoder is not None else build_encoder(config.encoder, self._shaper.schema)
        )
        self._columns = template_columns(config.path_template)
        self._hub = HubClient(
            config.endpoint, config.repo, config.branch, token, config.request_timeout
        )
        self._gate = CommitGate(config.endpoint, config.repo, config.branch)
        self._backoff = Backoff(config.retry.as_retry())
        self._open: dict[int, Window] = {}
        self._jobs: collections.deque[_Job] = collections.deque()
        self._writing: Window | None = None
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._ready = False
        self.commits = 0
        """Commits the Hub accepted."""
        self.commit_retries = 0
        """Commit attempts that failed and were tried again."""
        self.windows_failed = 0
        """Windows whose commit failed for good (their acks were released failed)."""
        self.last_commit = ""
        """The id of the last commit the Hub accepted."""

    # -- lifecycle (pipeline thread) -------------------------------------------------

    def start(self) -> None:
        """Probe the repository and branch (B29); start the writer thread."""
        self._hub.probe()
        self._ready = True
        if self._threaded and self._thread is None:
            self._stopping = False
            self._thread = threading.Thread(target=self._run, name=f"hf-{self.name}", daemon=True)
            self._thread.start()

    def ready(self) -> bool:
        return self._ready

    def close(self) -> None:
        self.abandon()
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=self.config.request_timeout + 5.0)
            self._thread = None
        self._hub.close()
        self._ready = False

    # -- rows (pipeline thread) ------------------------------------------------------

    def offer(self, row: object, key: bytes | None, lane: Lane, ack: AckToken) -> Offer:
        if self._pending() >= self.config.max_pending:
            if not self._threaded:
                self._drain_inline(time.monotonic())
            if self._pending() >= self.config.max_pending:
                return Offer.REJECTED
        values = self._shaper.shape(row)
        parts = tuple(_partition(values.get(c)) for c in self._columns)
        bucket = int(self._row_time(values) // self.config.window)
        window = self._open.get(bucket)
        if window is None:
            window = self._open[bucket] = Window(bucket)
        window.groups.setdefault((parts, self._shaper.shape_key(values)), []).append(values)
        window.rows += 1
        window.lanes.add(lane)
        acks = window.acks
        if not acks or (acks[-1] is not ack and all(a is not ack for a in acks)):
            ack.retain(window)
            acks.append(ack)
        if window.rows >= self.config.max_records:
            self._seal(bucket)
        return Offer.ACCEPTED

    def _row_time(self, values: dict[str, object]) -> float:
        if self.config.window_time == "processing":
            return self._clock.time()
        column = self.config.time_column
        value = values.get(column)
        if isinstance(value, dt.datetime):
            return (value if value.tzinfo else value.replace(tzinfo=dt.UTC)).timestamp()
        if isinstance(value, int | float) and not isinstance(value, bool):
            return value / 1000.0
        raise SinkError(
            f"time column {column!r} must be a datetime or epoch milliseconds, got {value!r}",
            ErrorClass.RECORD,
        )

    def _pending(self) -> int:
        return len(self._jobs) + (self._writing is not None)

    def _seal(self, bucket: int) -> None:
        window = self._open.pop(bucket)
        with self._cond:
            self._jobs.append(_Job(window))
            self._cond.notify_all()

    def tick(self) -> None:
        """Seal the windows the clock has passed the end of (B10)."""
        now = self._clock.time()
        for bucket in [b for b in self._open if (b + 1) * self.config.window <= now]:
            self._seal(bucket)
        if not self._threaded:
            self._drain_inline(time.monotonic())

    def flush(self, deadline: float) -> bool:
        """Seal every window and wait until each is committed or failed, or ``deadline``."""
        for bucket in sorted(self._open):
            self._seal(bucket)
        return self._wait(lambda: bool(self._jobs) or self._writing is not None, deadline)

    def flush_lanes(self, lanes: Collection[Lane], deadline: float) -> bool:
        """Commit the windows holding rows of ``lanes`` (B40); other windows stay open.

        A window holds rows of every lane that arrived in its time, so the rows of other
        lanes sharing it are committed along.
        """
        wanted = set(lanes)
        for bucket in sorted(b for b, w in self._open.items() if w.lanes & wanted):
            self._seal(bucket)

        def pending() -> bool:
            writing = self._writing
            if writing is not None and writing.lanes & wanted:
                return True
            return any(job.window.lanes & wanted for job in self._jobs)

        return self._wait(pending, deadline)

    def _wait(self, pending: Callable[[], bool], deadline: float) -> bool:
        """Wait until ``pending()`` is false (checked under the lock), or ``deadline``."""
        if not self._threaded:
            return self._drain_inline(deadline)
        with self._cond:
            while pending():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(min(remaining, 0.5))
        return True

    def abandon(self) -> int:
        """Fail the acks of every window not yet committed (B4)."""
        windows = list(self._open.values())
        self._open.clear()
        with self._cond:
            windows.extend(job.window for job in self._jobs)
            self._jobs.clear()
            if self._writing is not None:
                windows.append(self._writing)  # its commit may still land: failing is safe
            self._cond.notify_all()
        for window in windows:
            self._settle(window, ok=False)
        return sum(w.rows for w in windows)

    # -- commits (writer thread, or inline without io threads) -----------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopping and (
                    not self._jobs or self._jobs[0].not_before > time.monotonic()
                ):
                    wait = self._jobs[0].not_before - time.monotonic() if self._jobs else None
                    self._cond.wait(wait)
                if self._stopping:
                    return
                job = self._jobs.popleft()
                self._writing = job.window
            try:
                self._attempt(job)
            finally:
                with self._cond:
                    self._writing = None
                    self._cond.notify_all()

    def _drain_inline(self, deadline: float) -> bool:
        while self._jobs:
            job = self._jobs[0]
            wait = job.not_before - time.monotonic()
            if wait > 0:
                if time.monotonic() + wait > deadline:
                    return False
                time.sleep(wait)
            self._jobs.popleft()
            self._writing = job.window
            try:
                self._attempt(job)
            finally:
                self._writing = None
        return True

    def _attempt(self, job: _Job) -> None:
        """Commit one window; on a failure that can pass, queue it again after a backoff."""
        window = job.window
        if window.settled:
            return  # abandoned while queued
        job.attempts += 1
        try:
            if job.files is None:
                job.files = self._files(window)
            self.last_commit = self._commit(window, job.files)
        except HubError as exc:
            if exc.error_class is ErrorClass.RETRYABLE and not self._backoff.exhausted(
                job.attempts
            ):
                delay = max(self._backoff.delay(job.attempts), exc.retry_after or 0.0)
                self.commit_retries += 1
                logger.warning(
                    "sink %s: commit of %d rows (attempt %d) failed, retrying in %.1fs: %s",
                    self.name,
                    window.rows,
                    job.attempts,
                    delay,
                    exc.reason,
                )
                job.not_before = time.monotonic() + delay
                with self._cond:
                    self._jobs.appendleft(job)
                return
            self._failed(window, job.attempts, exc.reason)
            return
        except Exception as exc:
            logger.exception("sink %s: commit of %d rows failed", self.name, window.rows)
            self._failed(window, job.attempts, f"{type(exc).__name__}: {exc}")
            return
        self.commits += 1
        self._settle(window, ok=True)

    def _failed(self, window: Window, attempts: int, reason: str) -> None:
        self.windows_failed += 1
        logger.error(
            "sink %s: commit of %d rows failed after %d attempt(s); they stay upstream "
            "(a spool tier hands them on again): %s",
            self.name,
            window.rows,
            attempts,
            reason,
        )
        self._settle(window, ok=False)

    def _bounds(self, window: Window) -> tuple[dt.datetime, dt.datetime]:
        start = window.bucket * self.config.window
        return (
            dt.datetime.fromtimestamp(start, dt.UTC),
            dt.datetime.fromtimestamp(start + self.config.window, dt.UTC),
        )

    def _files(self, window: Window) -> list[CommitFile]:
        """One file per partition (and row shape), named by the template and its hash."""
        start, end = self._bounds(window)
        files: dict[str, CommitFile] = {}
        for (parts, _shape), rows in window.groups.items():
            data = self._encoder.encode(rows)
            values: dict[str, object] = dict(zip(self._columns, parts, strict=True))
            values.update(
                start=start, end=end, hash=self._encoder.digest(data), ext=self._encoder.extension
            )
            path = self.config.path_template.format_map(values)
            files[path] = CommitFile(path, data)
        return list(files.values())

    def _commit(self, window: Window, files: list[CommitFile]) -> str:
        start, end = self._bounds(window)
        summary = self.config.commit_message.format(
            rows=window.rows, files=len(files), start=start, end=end
        )
        description = (
            f"{window.rows} rows in {len(files)} file(s) for the window "
            f"{start.isoformat()} to {end.isoformat()}, committed by the spate sink {self.name}."
        )
        body = commit_payload(summary, description, files)
        if not self._gate.acquire(self.config.gate_timeout):
            raise HubError(
                f"the commit gate of {self._hub.where} stayed held for "
                f"{self.config.gate_timeout:.0f}s",
                ErrorClass.RETRYABLE,
                None,
                None,
            )
        try:
            return self._hub.commit(body)
        finally:
            self._gate.release()

    def _settle(self, window: Window, ok: bool) -> None:
        """Release the window's acks once, whoever gets there first (writer or abandon)."""
        with self._cond:
            if window.settled:
                return
            window.settled = True
        release_all(window.acks, ok, window)


def _partition(value: object) -> str:
    """A partition column's value as one path segment (Hive's default for null)."""
    if value is None:
        return DEFAULT_PARTITION
    return safe(str(value))
