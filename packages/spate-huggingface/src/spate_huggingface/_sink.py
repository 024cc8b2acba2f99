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

On the columnar path the sink takes frames (a :class:`~spate.sink.FrameSink`, B173):
``prepare_frame`` shapes each row of the frame as :meth:`HuggingFaceSink.offer` shapes a
row (the schema, the time column) and names the rows it cannot take by position (record
errors for those rows alone, B28); ``offer_frame`` adds every prepared row to its window,
all or nothing, under the same room check as ``offer``.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from spate import Clock
from spate.checkpoint import AckToken
from spate.errors import ErrorClass, ErrorPolicy, SinkError
from spate.records import ROW_COLUMN, Lane
from spate.sink import Backoff, Offer
from spate.sink.writebehind import CommitGates, WindowedWriter
from spate_parquet import RowShaper, parse_schema, safe

from spate_huggingface._encode import FileEncoder, build_encoder
from spate_huggingface._hub import CommitFile, HubClient, HubError, commit_payload
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
    """Its acks were released (guarded by the write-behind engine's lock)."""
    files: list[CommitFile] | None = None
    """The encoded files, once built (a retried commit sends the same)."""

    def holds(self, lanes: Collection[Lane]) -> bool:
        return not self.lanes.isdisjoint(lanes)


@dataclass(frozen=True, slots=True)
class _Prepared:
    """A frame's rows, shaped and checked: ``(values, window bucket)`` per row."""

    rows: list[tuple[dict[str, object], int]]

    def __len__(self) -> int:
        return len(self.rows)


class HuggingFaceSink(WindowedWriter[Window]):
    """Implements ``Sink`` and :class:`~spate.sink.FrameSink`; see the module docstring."""

    takes_frames = True
    """The columnar path hands it whole frames (B173)."""
    frame_needs_keys = False
    """Windows and partitions come from the frame's columns, never from record keys."""

    def __init__(
        self,
        name: str,
        config: HuggingFaceSinkConfig,
        clock: Clock,
        token: str,
        *,
        io_threads: int = 1,
        encoder: FileEncoder | None = None,
        commit_gates: CommitGates | None = None,
    ) -> None:
        """``token`` is the write token (already registered as a secret); ``encoder``
        replaces the one ``config.encoder`` names; ``commit_gates`` is the registry the
        commit gate's lock comes from (the pipeline's, B231; one of its own when None)."""
        self.name = name
        self.config = config
        self.on_record_error: ErrorPolicy = config.on_record_error
        self._clock = clock
        self._shaper = RowShaper(parse_schema(config.schema))
        self._encoder = (
            encoder if encoder is not None else build_encoder(config.encoder, self._shaper.schema)
        )
        self._columns = template_columns(config.path_template)
        self._hub = HubClient(
            config.endpoint, config.repo, config.branch, token, config.request_timeout
        )
        # One commit at a time per repository and branch in the pipeline (B80, B231); a
        # gate held past gate_timeout fails the attempt, retried after the backoff.
        gates = commit_gates if commit_gates is not None else CommitGates()
        self._init_writer(
            clock=clock,
            threaded=io_threads > 0,
            backoff=Backoff(config.retry.as_retry()),
            join_timeout=config.request_timeout + 5.0,
            gate=gates.gate(self._hub.where, config.gate_timeout, when_held="retry"),
            breaker=config.breaker,
        )
        self._open: dict[int, Window] = {}
        self._ready = False
        self.commits = 0
        """Commits the Hub accepted."""
        self.last_commit = ""
        """The id of the last commit the Hub accepted."""

    # -- lifecycle (pipeline thread) -------------------------------------------------

    def start(self) -> None:
        """Probe the repository and branch (B29); start the writer thread."""
        self._hub.probe()
        self._ready = True
        self._start_writer(f"hf-{self.name}")

    def ready(self) -> bool:
        return self._ready

    @property
    def commit_retries(self) -> int:
        """Commit attempts that failed and were tried again."""
        return self.write_retries

    def close(self) -> None:
        self._stop_writer()
        self._hub.close()
        self._ready = False

    # -- rows (pipeline thread) ------------------------------------------------------

    def offer(self, row: object, key: bytes | None, lane: Lane, ack: AckToken) -> Offer:
        if not self._has_room(self.config.max_pending, self._clock.monotonic()):
            return Offer.REJECTED
        values = self._shaper.shape(row)
        self._add(values, int(self._row_time(values) // self.config.window), lane, ack)
        return Offer.ACCEPTED

    def prepare_frame(self, frame: object) -> tuple[object, list[tuple[int, str]]]:
        """Shape each row of a polars frame as :meth:`offer` does; ``(prepared rows, bad
        rows as (position, reason))`` (B28, B173). Holds nothing."""
        import polars as pl

        if not isinstance(frame, pl.DataFrame):
            raise SinkError(
                f"the Hugging Face sink takes polars frames, got {type(frame).__name__}",
                ErrorClass.FATAL,
            )
        data = frame.drop(ROW_COLUMN) if ROW_COLUMN in frame.columns else frame
        rows: list[tuple[dict[str, object], int]] = []
        bad: list[tuple[int, str]] = []
        window = self.config.window
        for position, row in enumerate(data.iter_rows(named=True)):
            try:
                values = self._shaper.shape(row)
                rows.append((values, int(self._row_time(values) // window)))
            except SinkError as exc:
                if exc.error_class is not ErrorClass.RECORD:
                    raise
                bad.append((position, str(exc)))
        return _Prepared(rows), bad

    def offer_frame(
        self,
        frame: object,
        keys: Sequence[bytes | None] | None,
        lane: Lane,
        ack: AckToken,
        shards: Sequence[int] | None = None,
    ) -> Offer:
        """Add every prepared row to its window, or none for now (``REJECTED``, B7)."""
        if not isinstance(frame, _Prepared):
            raise SinkError("offer_frame takes what prepare_frame returned", ErrorClass.FATAL)
        if not frame.rows:
            return Offer.ACCEPTED
        if not self._has_room(self.config.max_pending, self._clock.monotonic()):
            return Offer.REJECTED
        for values, bucket in frame.rows:
            self._add(values, bucket, lane, ack)
        return Offer.ACCEPTED

    def _add(self, values: dict[str, object], bucket: int, lane: Lane, ack: AckToken) -> None:
        """Add one shaped row to the open window of ``bucket`` (sealed when full)."""
        parts = tuple(_partition(values.get(c)) for c in self._columns)
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

    def _seal(self, bucket: int) -> None:
        self._queue(self._open.pop(bucket))

    def tick(self) -> None:
        """Seal the windows the clock has passed the end of (B10)."""
        now = self._clock.time()
        for bucket in [b for b in self._open if (b + 1) * self.config.window <= now]:
            self._seal(bucket)
        self._write_due()

    # -- the write queue's hooks ---------------------------------------------------------

    def _seal_all(self) -> None:
        for bucket in sorted(self._open):
            self._seal(bucket)

    def _seal_lanes(self, lanes: Collection[Lane]) -> None:
        # A window holds rows of every lane that arrived in its time, so the rows of
        # other lanes sharing it are committed along.
        for bucket in sorted(b for b, w in self._open.items() if w.holds(lanes)):
            self._seal(bucket)

    def _take_open(self) -> list[Window]:
        windows = list(self._open.values())
        self._open.clear()
        return windows

    def _rows(self, window: Window) -> int:
        return window.rows

    def _describe(self, window: Window) -> str:
        return f"commit of {window.rows} rows"

    def _retry_delay(self, exc: SinkError, attempts: int) -> float:
        after = exc.retry_after if isinstance(exc, HubError) else None
        return max(self._backoff.delay(attempts), after or 0.0)

    # -- commits (writer thread, or inline without io threads) -----------------------

    def _write_window(self, window: Window) -> None:
        """Encode the window's files (once: a retried commit sends the same bytes)."""
        if window.files is None:
            window.files = self._files(window)

    def _commit_window(self, window: Window) -> None:
        """Send the one commit (under the repository's commit gate, B80)."""
        self.last_commit = self._commit(window, window.files or [])
        self.commits += 1

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
        return self._hub.commit(commit_payload(summary, description, files))


def _partition(value: object) -> str:
    """A partition column's value as one path segment (Hive's default for null)."""
    if value is None:
        return DEFAULT_PARTITION
    return safe(str(value))
