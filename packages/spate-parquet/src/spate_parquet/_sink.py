"""The Parquet sink: per-lane windows cut by the input alone, written whole, acked after.

Why not the shared :class:`~spate.sink.SinkPool`: the pool seals batches on time
(``linger``, checkpoint ticks), so where a file ends would depend on timing; here a file
ends where the *input* says — ``max_records``, ``max_bytes``, a record-time window
boundary, a new row shape — so that a replay cuts the same files (B50).

Rows are kept per open window, keyed by lane (``topic-partition``), Hive directory and
time bucket. Each row's source position is its batch's first offset plus its index in
the batch (one row per record; see the docs for chains that filter). A sealed window
goes to one writer thread, which builds the Arrow table, audits it (write-audit-publish),
encodes it with pinned settings, writes it durably (local: fsync, rename, fsync of the
directory; S3: the PUT returned), publishes it in manifest mode, and only then releases
the acks it holds (B2, B51): committed offsets never pass an unwritten window. Each
window is the holder of its acks (``ack.retain(window)``) and releases each once (B39).
On revocation only the revoked lanes' windows are sealed and written (B40).

At start the sink learns, per lane and directory, the last position already durable
(from the file names, or from the manifest), and drops replayed rows up to it while
acking them: after a crash the next window starts exactly where the clean run's did,
so replays write the same bytes under the same names and every record lands once.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from spate import Clock
from spate.checkpoint import AckToken
from spate.errors import ErrorClass, ErrorPolicy, SinkError
from spate.records import ROW_COLUMN, Lane
from spate.sink import Backoff, Offer, estimate_row_bytes
from spate.sink.writebehind import CommitGate, CommitGates, WindowedWriter

from spate_parquet._audit import AuditFailure, Auditor
from spate_parquet._encode import Encoder, parse_key, safe
from spate_parquet._frames import prepare_frame, runs, seconds
from spate_parquet._manifest import Manifest, ManifestStore, Part
from spate_parquet._schema import RowShaper, parse_schema
from spate_parquet._store import Store, open_store
from spate_parquet.config import ParquetSinkConfig

logger = logging.getLogger(__name__)

_WindowKey = tuple[Lane, str, int]
"""(lane, Hive directory, time bucket)."""


@dataclass(slots=True, eq=False)
class Window:
    """The rows of one file being filled; the holder of its acks (B39), by identity."""

    lane: Lane
    directory: str
    bucket: int
    shape: tuple[str, ...]
    rows: list[dict[str, object]] = field(default_factory=list)
    tables: list[pa.Table] = field(default_factory=list)
    """Arrow tables from the columnar path, in order before ``rows``."""
    count: int = 0
    """Rows held, in ``rows`` and ``tables``."""
    nbytes: int = 0
    first: int = -1
    last: int = -1
    acks: list[AckToken] = field(default_factory=list)
    row_bytes: int = 64
    """Estimated in-memory size of one row (from the window's first row)."""
    settled: bool = False
    """Its acks were released (guarded by the write-behind engine's lock)."""
    publish: tuple[Part, str] | None = None
    """In manifest mode, the written part and its schema, for the commit."""

    def holds(self, lanes: Collection[Lane]) -> bool:
        return self.lane in lanes


@dataclass(frozen=True, slots=True)
class _Prepared:
    """A source batch's rows, checked: their table and each one's index in the batch
    (None: the table carries them in its ``__spate_row`` column)."""

    table: pa.Table
    index: Sequence[int] | None


class ParquetSink(WindowedWriter[Window]):
    """Implements ``Sink``; see the module docstring."""

    takes_frames = True
    """A :class:`~spate.sink.FrameSink`: the columnar path hands it whole frames."""
    frame_needs_keys = False
    """Windows and partitions come from the frame's columns, never from record keys."""

    def __init__(
        self,
        name: str,
        config: ParquetSinkConfig,
        clock: Clock,
        io_threads: int = 1,
        gate: Callable[[str, float], CommitGate] | None = None,
    ) -> None:
        """``gate(destination, timeout)`` builds the commit gate of manifest mode; by
        default a gate of a registry of its own (:class:`~spate.sink.writebehind.
        CommitGates`): the factory passes the pipeline's (B231)."""
        self.name = name
        self.config = config
        self.on_record_error: ErrorPolicy = config.on_record_error
        self._clock = clock
        self._store: Store = open_store(config)
        self._shaper = RowShaper(parse_schema(config.schema))
        self._encoder = Encoder(config, self._shaper.schema)
        self._auditor = Auditor(config.audits) if config.audits is not None else None
        self._manifest: ManifestStore | None = None
        self._gate: CommitGate | None = None
        if config.publish == "manifest":
            # The engine runs each publish under the gate (after the part is durable).
            build = gate if gate is not None else CommitGates().gate
            self._gate = build(f"{self._store.endpoint}#{config.table}", config.gate_timeout)
            self._manifest = ManifestStore(
                self._store,
                config.table,
                None,
                keep=config.keep_manifests,
                grace=config.manifest_grace,
            )
        self._init_writer(
            clock=clock,
            threaded=io_threads > 0,
            backoff=Backoff(config.retry),
            join_timeout=30.0,
            gate=self._gate,
            breaker=config.breaker,
        )
        self._root = f"{config.table}.parts/" if config.publish == "manifest" else ""
        self._open: dict[_WindowKey, Window] = {}
        self._covered: dict[tuple[Lane, str], int] = {}
        self._ready = False
        self._token: AckToken | None = None
        self._index = 0
        self._start = 0
        self._last: Window | None = None
        self._placed = bool(config.window or config.partition_by)
        self._per_row = config.one_row_per_record
        self._declared = self._shaper.schema is not None
        self._max_pending = config.max_pending
        self._check_room = True
        """Whether a seal happened since the room for another job was last seen."""
        self._max_records = config.max_records
        self._max_bytes = config.max_bytes
        self.files_written = 0
        self.rows_replayed = 0
        """Replayed rows dropped because a durable file already holds them."""
        self.rows_audit_skipped = 0
        self.last_manifest: Manifest | None = None

    # -- lifecycle (pipeline thread) -------------------------------------------------

    def start(self) -> None:
        self._store.probe()
        self._load_covered()
        self._ready = True
        self._start_writer(f"spate-parquet-{self.name}")

    def _load_covered(self) -> None:
        """The last durable position per lane and directory, from names or the manifest."""
        if self._manifest is not None:
            manifest = self._manifest.latest()
            self.last_manifest = manifest
            keys = [p.path for p in manifest.parts]
            orphans = self._manifest.orphans(manifest)
            if orphans:
                action = "deleting" if self.config.orphans == "delete" else "keeping"
                logger.info(
                    "sink %s: %d unpublished parts under %s (%s them)",
                    self.name,
                    len(orphans),
                    self._manifest.prefix,
                    action,
                )
                if self.config.orphans == "delete":
                    for key in orphans:
                        self._store.delete(key)
        else:
            keys = [k for k in self._store.list("") if k.endswith(".parquet")]
        for key in keys:
            covered = parse_key(key)
            if covered is None:
                continue
            directory = covered.directory.removeprefix(self._root)
            at = (Lane(covered.stream, covered.partition), directory)
            self._covered[at] = max(self._covered.get(at, -1), covered.last)

    def ready(self) -> bool:
        return self._ready

    def close(self) -> None:
        self._stop_writer()  # closes the commit gate too
        self._store.close()
        self._ready = False

    # -- rows (pipeline thread) ------------------------------------------------------

    def offer(self, row: object, key: bytes | None, lane: Lane, ack: AckToken) -> Offer:
        # Only a seal adds a job, so the room for one is checked after a seal, not per row.
        if self._check_room and not self._room():
            return Offer.REJECTED
        if ack is not self._token:
            self._next_batch(ack)
        position = self._start + self._index
        # A refused row still stands for its record (the chain may skip it), so the
        # index moves on; a REJECTED row is offered again and does not.
        self._index += 1
        values = self._shaper.shape(row)
        if self._placed:
            directory, bucket = self._place(values, lane)
        else:
            directory, bucket = "", 0
        window = self._last
        # Fast path: the row continues the window of the previous row.
        if (
            window is not None
            and position > window.last
            and window.bucket == bucket
            and window.lane == lane
            and window.directory == directory
            and (self._declared or window.shape == tuple(values))
        ):
            if window.acks[-1] is not ack:
                ack.retain(window)
                window.acks.append(ack)
            window.rows.append(values)
            window.count += 1
            window.nbytes += window.row_bytes
            window.last = position
            if window.count >= self._max_records or window.nbytes >= self._max_bytes:
                self._seal((lane, directory, bucket))
            return Offer.ACCEPTED
        covered = self._covered.get((lane, directory), -1)
        if position <= covered and (self._per_row or ack.next_offset - 1 <= covered):
            self.rows_replayed += 1  # already in a durable file: acked with the batch
            return Offer.ACCEPTED
        self._add(values, lane, directory, bucket, position, ack)
        return Offer.ACCEPTED

    def _room(self) -> bool:
        """Whether another window may be sealed now (``max_pending``)."""
        deadline = self._clock.monotonic() + self.config.gate_timeout
        if not self._has_room(self._max_pending, deadline):
            return False
        self._check_room = False
        return True

    def _next_batch(self, ack: AckToken) -> None:
        """A new source batch; check the one before held one row per record."""
        previous = self._token
        if (
            self._per_row
            and previous is not None
            and previous.lane == ack.lane
            and self._index != previous.records
        ):
            # Positions are offsets only when every record gives one row; from here on
            # replayed rows are skipped only by whole source batches.
            logger.error(
                "sink %s: a source batch of %d records gave %d rows, but one_row_per_record "
                "is set; set it to false for this chain (replays may now repeat rows)",
                self.name,
                previous.records,
                self._index,
            )
            self._per_row = False
        self._token = ack
        self._index = 0
        self._start = ack.next_offset - ack.records

    def _place(self, values: dict[str, object], lane: Lane) -> tuple[str, int]:
        cfg = self.config
        bucket = 0
        if cfg.window:
            if cfg.window_time == "record":
                seconds = _seconds(values.get(cfg.time_column), cfg.time_column)
            else:
                seconds = self._clock.time()
            bucket = int(seconds // cfg.window)
        return self._place_at(values, bucket)

    def _place_at(self, values: dict[str, object], bucket: int) -> tuple[str, int]:
        """The Hive directory of a row in time bucket ``bucket``."""
        cfg = self.config
        parts: list[str] = []
        if cfg.window and cfg.time_partitions:
            start = dt.datetime.fromtimestamp(bucket * cfg.window, dt.UTC)
            parts.append(start.strftime(cfg.time_partitions).strip("/"))
        for column in cfg.partition_by:
            value = values.get(column)
            text = "__HIVE_DEFAULT_PARTITION__" if value is None else safe(str(value))
            parts.append(f"{column}={text}")
        return ("/".join(parts) + "/" if parts else ""), bucket

    def _add(
        self,
        values: dict[str, object],
        lane: Lane,
        directory: str,
        bucket: int,
        position: int,
        ack: AckToken,
    ) -> None:
        window = self._window_for(lane, directory, bucket, self._shaper.shape_key(values), ack)
        if window.first < 0:
            window.first = position
            window.row_bytes = estimate_row_bytes(values)
        window.rows.append(values)
        window.count += 1
        window.nbytes += window.row_bytes
        window.last = position
        self._last = window
        if window.count >= self._max_records or window.nbytes >= self._max_bytes:
            self._seal((lane, directory, bucket))

    def _window_for(
        self, lane: Lane, directory: str, bucket: int, shape: tuple[str, ...], ack: AckToken
    ) -> Window:
        """The open window a row (or run of rows) of this key joins, holding ``ack``."""
        if self.config.window:
            # A row of a later window closes this lane's earlier windows; and one lane
            # and directory has one open window at a time, so the files of a directory
            # cover disjoint, ordered ranges of positions (what a restart relies on).
            for key in list(self._open):
                if key[0] == lane and (
                    key[2] < bucket or (key[1] == directory and key[2] != bucket)
                ):
                    self._seal(key)
        wkey = (lane, directory, bucket)
        window = self._open.get(wkey)
        if window is not None and window.shape != shape:
            self._seal(wkey)  # a new schema opens a new file
            window = None
        if window is None:
            window = Window(lane, directory, bucket, shape)
            self._open[wkey] = window
        if not window.acks or window.acks[-1] is not ack:
            # A batch's rows arrive together, so a window sees each ack in one run.
            ack.retain(window)
            window.acks.append(ack)
        return window

    # -- columns (pipeline thread; the columnar path) --------------------------------

    def prepare_frame(self, frame: object) -> tuple[object, list[tuple[int, str]]]:
        """The per-column check of a frame: ``(table to offer, bad rows)`` (B28).

        With record-time windows a row without a time is a bad row, as on the row path.
        """
        table, bad = prepare_frame(frame, self._shaper.schema)
        return self._timeless(table, bad)

    def _timeless(
        self, table: pa.Table, bad: list[tuple[int, str]]
    ) -> tuple[pa.Table, list[tuple[int, str]]]:
        """``table`` without the rows that have no time under record-time windows, which
        join ``bad`` (positions of the input, before ``bad`` was filtered out)."""
        cfg = self.config
        if cfg.window and cfg.window_time == "record" and cfg.time_column in table.column_names:
            missing = pc.is_null(table.column(cfg.time_column))
            if pc.any(missing).as_py():
                # Positions of ``bad`` are of the frame, before the filter above.
                refused = {position for position, _ in bad}
                kept = [i for i in range(table.num_rows + len(bad)) if i not in refused]
                reason = f"time column {cfg.time_column!r} is null"
                bad = sorted(
                    [*bad, *((kept[i], reason) for i in pc.indices_nonzero(missing).to_pylist())]
                )
                table = table.filter(pc.invert(missing))
        return table, bad

    # -- a source batch's rows at once (pipeline thread; the row chain's batch offer) -

    @property
    def takes_rows(self) -> bool:
        """Whether the chain may hand over a source batch's rows at once: with a declared
        schema (checked per column) and one row per record (a row's index in the batch
        is its record's)."""
        return self._declared and self._per_row

    def prepare_rows(
        self, rows: list[object], keys: Sequence[bytes | None], lane: Lane
    ) -> tuple[object, list[tuple[int, str]]]:
        """Check a source batch's rows per column; ``(table to offer, bad rows)`` (B28).

        The bad rows are those :meth:`offer` would refuse one by one, with its reasons;
        the good ones become one Arrow table whose row indexes stay their positions.
        """
        table, index, bad = self._shaper.table(rows)
        if not self._placed:
            return _Prepared(table, index), bad
        # Windows and partitions are found per column, as for a frame.
        table = table.append_column(ROW_COLUMN, pa.array(index, type=pa.int64()))
        table, bad = self._timeless(table, bad)
        return _Prepared(table, None), bad

    def offer_rows(self, prepared: object, lane: Lane, ack: AckToken) -> Offer:
        """Take every prepared row or none (``REJECTED``), cut into windows as rows are:
        the same files, names and bytes as one :meth:`offer` per row (B50, B103)."""
        if not isinstance(prepared, _Prepared):
            raise SinkError("offer_rows takes what prepare_rows returned", ErrorClass.FATAL)
        index = prepared.index
        if index is None:
            return self.offer_frame(prepared.table, None, lane, ack)
        if not index:
            return Offer.ACCEPTED
        if self._check_room and not self._room():
            return Offer.REJECTED
        self._token = None  # the row path's per-batch count does not see these rows
        start = ack.next_offset - ack.records
        if isinstance(index, range):
            positions: Sequence[int] = range(start + index.start, start + index.stop)
        else:
            positions = [start + i for i in index]
        self._add_run(prepared.table, positions, lane, "", 0, ack)
        return Offer.ACCEPTED

    def offer_frame(
        self,
        frame: object,
        keys: Sequence[bytes | None] | None,
        lane: Lane,
        ack: AckToken,
        shards: Sequence[int] | None = None,
    ) -> Offer:
        """Take a prepared table's rows, all or nothing, cut into windows as rows are.

        Each row's position is its batch's first offset plus its record index
        (``__spate_row``), so positions stay exact when operators drop rows.
        """
        table = frame if isinstance(frame, pa.Table) else pa.table(frame)
        if not table.num_rows:
            return Offer.ACCEPTED
        if self._check_room and not self._room():
            return Offer.REJECTED
        self._token = None  # the row path's per-batch count does not see these rows
        start = ack.next_offset - ack.records
        positions = pc.add(table.column(ROW_COLUMN).cast(pa.int64()), start)
        data = table.drop_columns([ROW_COLUMN])
        for first, stop, directory, bucket in self._runs(data):
            self._add_run(
                data.slice(first, stop - first),
                positions.slice(first, stop - first).to_pylist(),
                lane,
                directory,
                bucket,
                ack,
            )
        return Offer.ACCEPTED

    def _runs(self, data: pa.Table) -> list[tuple[int, int, str, int]]:
        """``(start, stop, directory, bucket)`` runs of rows sharing a window key."""
        cfg = self.config
        if not self._placed:
            return [(0, data.num_rows, "", 0)]
        keys: list[pa.ChunkedArray] = []
        if cfg.window and cfg.window_time == "record":
            if cfg.time_column not in data.column_names:
                raise SinkError(
                    f"the frame has no time column {cfg.time_column!r}", ErrorClass.FATAL
                )
            bucket_column = pc.floor(
                pc.divide(seconds(data.column(cfg.time_column), cfg.time_column), cfg.window)
            ).cast(pa.int64())
            keys.append(bucket_column)
        for column in cfg.partition_by:
            if column in data.column_names:
                keys.append(data.column(column))
        by_record_time = bool(cfg.window) and cfg.window_time == "record"
        named = [c for c in cfg.partition_by if c in data.column_names]
        out = []
        # One Python call per run, not per row; the directory is named as the row path
        # names it.
        for first, stop in runs(keys, data.num_rows):
            row = {name: data.column(name)[first].as_py() for name in named}
            if by_record_time:
                directory, bucket = self._place_at(row, int(keys[0][first].as_py()))
            else:
                directory, bucket = self._place(row, Lane("", 0))
            out.append((first, stop, directory, bucket))
        return out

    def _add_run(
        self,
        data: pa.Table,
        positions: Sequence[int],
        lane: Lane,
        directory: str,
        bucket: int,
        ack: AckToken,
    ) -> None:
        """Add rows (``data``) at source ``positions`` (a range or a list) to windows."""
        covered = self._covered.get((lane, directory), -1)
        lowest = positions[0] if isinstance(positions, range) else min(positions, default=0)
        if covered >= 0 and lowest <= covered:
            keep = [p > covered for p in positions]
            positions = [p for p in positions if p > covered]
            self.rows_replayed += len(keep) - len(positions)  # acked with the batch
            data = data.filter(pa.array(keep, type=pa.bool_()))
        shape = self._shaper.shape_key(dict.fromkeys(data.column_names))
        row_bytes = max(data.nbytes // max(data.num_rows, 1), 1)
        while data.num_rows:
            window = self._window_for(lane, directory, bucket, shape, ack)
            room = self._max_records - window.count
            if row_bytes:
                room = min(room, max((self._max_bytes - window.nbytes) // row_bytes, 1))
            part, data = data.slice(0, room), data.slice(room)
            taken, positions = positions[:room], positions[room:]
            if window.first < 0:
                window.first = taken[0]
                window.row_bytes = row_bytes
            if window.rows:
                window.tables.append(self._encoder.table(window.rows))
                window.rows = []
            window.tables.append(part)
            window.count += part.num_rows
            window.nbytes += part.num_rows * row_bytes
            window.last = taken[-1]
            self._last = None  # the row fast path must look the window up again
            if window.count >= self._max_records or window.nbytes >= self._max_bytes:
                self._seal((lane, directory, bucket))

    def _seal(self, wkey: _WindowKey) -> None:
        window = self._open.pop(wkey)
        if self._last is window:
            self._last = None
        # Later replays skip what this file holds once it is durable; in-process, the
        # file is on its way, so a row re-offered for it now would be a duplicate.
        self._covered[(window.lane, window.directory)] = window.last
        self._check_room = True
        self._queue(window)

    def tick(self) -> None:
        """Seal processing-time windows that have ended; never cuts a window early (B10)."""
        cfg = self.config
        if cfg.window and cfg.window_time == "processing":
            bucket = int(self._clock.time() // cfg.window)
            for key in [k for k in self._open if k[2] < bucket]:
                self._seal(key)
        self._write_due()

    # -- the write queue's hooks ---------------------------------------------------------

    def _seal_all(self) -> None:
        for key in list(self._open):
            self._seal(key)

    def _seal_lanes(self, lanes: Collection[Lane]) -> None:
        # Windows of other lanes stay open, so their files are cut where the input says.
        for key in [k for k in self._open if k[0] in lanes]:
            self._seal(key)

    def _take_open(self) -> list[Window]:
        windows = list(self._open.values())
        self._open.clear()
        self._last = None
        return windows

    def _rows(self, window: Window) -> int:
        return window.count

    def _describe(self, window: Window) -> str:
        return f"write of {window.lane} positions {window.first}-{window.last}"

    def _unwritten(self, window: Window) -> None:
        """Let a replay of an unwritten window's rows in again."""
        at = (window.lane, window.directory)
        if self._covered.get(at, -1) >= window.first:
            self._covered[at] = window.first - 1

    # -- writing (writer thread, or inline without io threads) -----------------------

    def _write_window(self, window: Window) -> None:
        try:
            self._write(window)
        except AuditFailure as failure:
            self._audit_failed(window, failure)

    def _write(self, window: Window) -> None:
        tables = list(window.tables)
        if window.rows or not tables:
            tables.append(self._encoder.table(window.rows))
        # One contiguous table: Parquet encodes it faster than many small chunks, and
        # the bytes are the same either way.
        table = tables[0] if len(tables) == 1 else pa.concat_tables(tables).combine_chunks()
        if self._auditor is not None:
            self._auditor.audit(table)
        data = self._encoder.encode(table)
        key = self._encoder.file_key(
            self._root + window.directory, window.lane, window.first, window.last, data
        )
        self._store.put(key, data)
        if self._manifest is None:
            self.files_written += 1
            return
        window.publish = (
            Part(
                key,
                table.num_rows,
                len(data),
                window.lane.stream,
                window.lane.partition,
                window.first,
                window.last,
                0,
            ),
            _schema_text(table.schema),
        )

    def _commit_window(self, window: Window) -> None:
        """Publish the durable part in a new manifest version (B52, B128); the engine runs
        this under the commit gate and releases the acks after it."""
        if self._manifest is None or window.publish is None:
            return
        part, schema = window.publish
        self.last_manifest = self._manifest.publish(part, schema)
        self.files_written += 1

    def _audit_failed(self, window: Window, failure: AuditFailure) -> None:
        policy = self.config.audits.on_failure if self.config.audits else "fail"
        logger.error(
            "sink %s: part of %s positions %d-%d kept out: %s (on_failure: %s)",
            self.name,
            window.lane,
            window.first,
            window.last,
            failure,
            policy,
        )
        if policy == "skip":
            self.rows_audit_skipped += window.count
            self._settle(window, ok=True)
        else:
            self._settle(window, ok=False)


def _schema_text(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name}: {f.type}" for f in schema)


def _seconds(value: object, column: str) -> float:
    """A row time as epoch seconds: a datetime (naive = UTC) or epoch milliseconds."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return value.timestamp()
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value / 1000.0
    raise SinkError(
        f"time column {column!r} must be a datetime or epoch milliseconds, got {value!r}",
        ErrorClass.RECORD,
    )
