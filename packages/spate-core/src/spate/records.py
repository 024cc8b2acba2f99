"""What flows out of a source: lanes, payload batches and their borrowed views.

A *lane* is the unit of ordering and commit (a Kafka topic-partition, an S3 split). A
:class:`PayloadBatch` is what one poll returns for one lane: payloads are ``memoryview``
objects over buffers the source owns. They are *borrowed*: no operator may keep one
after its batch is processed; keep ``bytes(view)`` instead. Where a view spans a whole
object, ``view.obj`` returns that object without a copy (docs/concepts/architecture.md).

A source that holds every payload as a whole ``bytes`` object (Kafka) may hand those over
as :attr:`PayloadBatch.values` and leave the views, offsets and timestamps to be built
only when something reads them (:meth:`PayloadBatch.lazy`): the row path then passes the
``bytes`` to a deserializer that takes them (``takes_bytes``) without a view per record,
and per-record fields nobody asks for are never read from the client's messages.

Record headers (:class:`Headers`) are such a field: a source that has them passes a
function that reads them (``headers=`` of :meth:`PayloadBatch.lazy`), called only when a
chain with ``meta=True``, a sink's metadata column (:class:`MetaSource`) or a frame's
metadata column reads them (B250, B251, ADR 0020).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Final, Literal, NamedTuple

ROW_COLUMN: Final = "__spate_row"
"""The column of a frame (an Arrow table on the columnar path) that gives each row the
index of its record in the source batch: a batch deserializer adds it, the chain and the
sinks read it to charge a bad value to its own record and to place rows by offset."""


class Lane(NamedTuple):
    """A unit of ordering and commit: ``(stream, partition)``.

    Kafka uses ``(topic, partition)``; a source without partitions uses its own stream
    name and partition 0, an S3 backfill ``(split_id, 0)``.
    """

    stream: str
    partition: int

    def __str__(self) -> str:
        return f"{self.stream}[{self.partition}]"


class Headers(Mapping[str, bytes | None]):
    """A record's headers, read-only: the ``(key, value)`` pairs in the order the record
    carries them, with a mapping view over them (B250).

    :attr:`pairs` keeps every header, repeated keys included, in order. As a mapping,
    ``headers[key]`` is the *last* value of ``key`` (Kafka's ``lastHeader``), iteration
    gives each distinct key once in first-seen order, and :meth:`get_all` gives every
    value of one key in order. A value is ``bytes``, or ``None`` for a header Kafka
    carries without a value; values are never decoded (they may be any bytes). Two
    ``Headers`` are equal when their pairs are.
    """

    __slots__ = ("_last", "_pairs")

    def __init__(self, pairs: Iterable[tuple[str, bytes | None]] = ()) -> None:
        self._pairs: tuple[tuple[str, bytes | None], ...] = tuple(pairs)
        self._last: dict[str, bytes | None] | None = None

    @classmethod
    def of(cls, pairs: list[tuple[str, bytes | None]] | None) -> Headers:
        """The headers of a client's list of pairs (``None`` or empty: :data:`NO_HEADERS`)."""
        return cls(pairs) if pairs else NO_HEADERS

    @property
    def pairs(self) -> tuple[tuple[str, bytes | None], ...]:
        """Every header as ``(key, value)``, in the record's order."""
        return self._pairs

    def get_all(self, key: str) -> tuple[bytes | None, ...]:
        """Every value of ``key`` in order (empty when the record has none)."""
        return tuple(v for k, v in self._pairs if k == key)

    def _index(self) -> dict[str, bytes | None]:
        last = self._last
        if last is None:
            # A dict built from the pairs keeps each key's first position and last value.
            last = self._last = dict(self._pairs)
        return last

    def __getitem__(self, key: str) -> bytes | None:
        return self._index()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._index())

    def __len__(self) -> int:
        return len(self._index())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Headers):
            return self._pairs == other._pairs
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._pairs)

    def __repr__(self) -> str:
        return f"Headers({list(self._pairs)!r})"


NO_HEADERS: Final = Headers()
"""The headers of a record that has none (shared: :class:`Headers` cannot change)."""


MetaKind = Literal[
    "offset", "partition", "timestamp", "timestamp_ms", "topic", "key", "value", "header"
]
META_NAMES: Final[tuple[str, ...]] = (
    "$offset",
    "$partition",
    "$timestamp",
    "$timestamp_ms",
    "$topic",
    "$key",
    "$value",
    "$header.<name>",
)
"""The metadata a sink column may take (ADR 0020), as written in a ``columns:`` list."""


class MetaSource(NamedTuple):
    """One piece of a record's metadata, as a sink column takes it (B252, ADR 0020).

    ``offset`` and ``partition`` are ints, ``timestamp`` an aware UTC ``datetime`` (of the
    record's millisecond timestamp), ``timestamp_ms`` that int, ``topic`` the lane's stream
    (the Kafka topic), ``key`` and ``value`` the record's bytes (``key`` None when the
    record has none), ``header`` the last value of header ``header`` (None when the record
    lacks it, :class:`Headers`).
    """

    kind: MetaKind
    header: str = ""

    @classmethod
    def parse(cls, text: str) -> MetaSource:
        """``$offset``, ``$header.tenant``, ...; raises ``ValueError`` naming the known ones."""
        name = text.strip()
        if name.startswith("$header."):
            header = name[len("$header.") :]
            if header:
                return cls("header", header)
        elif name.startswith("$") and name[1:] in _META_KINDS:
            return cls(name[1:])  # type: ignore[arg-type]
        raise ValueError(
            f"unknown record metadata {name!r}; expected one of {', '.join(META_NAMES)}"
        )

    def __str__(self) -> str:
        return f"$header.{self.header}" if self.kind == "header" else f"${self.kind}"


_META_KINDS: Final = frozenset(
    ("offset", "partition", "timestamp", "timestamp_ms", "topic", "key", "value")
)


class MetaColumn(NamedTuple):
    """A sink column filled from its record's metadata: the column's ``name``, its
    ``source`` and its ``position`` among the sink's columns (for rows given as tuples)."""

    name: str
    source: MetaSource
    position: int


class PayloadBatch:
    """Records polled from one lane in one call, in offset order.

    ``next_offset`` is the position to commit once the whole batch is delivered
    (normally ``offsets[-1] + 1``). ``timestamps`` are milliseconds since the epoch
    (0 when unknown). All per-record lists have the same length.

    Built eagerly with every list (``PayloadBatch(lane=..., offsets=..., ...)``), or by
    :meth:`lazy` from whole ``bytes`` values and functions that read the other fields on
    first access; either way every attribute reads the same and each list is built at
    most once.
    """

    __slots__ = (
        "_count",
        "_first_offset",
        "_headers",
        "_keys",
        "_nbytes",
        "_offsets",
        "_payloads",
        "_read_first_timestamp",
        "_read_headers",
        "_read_keys",
        "_read_offsets",
        "_read_timestamps",
        "_timestamps",
        "_values",
        "lane",
        "next_offset",
    )

    def __init__(
        self,
        lane: Lane,
        offsets: list[int],
        payloads: list[memoryview],
        keys: list[bytes | None],
        timestamps: list[int],
        next_offset: int,
        headers: list[Headers] | None = None,
    ) -> None:
        self.lane = lane
        self.next_offset = next_offset
        self._headers: list[Headers] | None = headers
        self._read_headers: Callable[[], list[Headers]] | None = None
        self._offsets: list[int] | None = offsets
        self._payloads: list[memoryview] | None = payloads
        self._keys: list[bytes | None] | None = keys
        self._timestamps: list[int] | None = timestamps
        self._values: list[bytes] | None = None
        self._nbytes: int | None = None
        # An eager batch's lists may still grow after construction (a source filling
        # it): its length and first offset are read from them.
        self._count: int | None = None
        self._first_offset: int | None = None
        self._read_offsets: Callable[[], list[int]] | None = None
        self._read_keys: Callable[[], list[bytes | None]] | None = None
        self._read_timestamps: Callable[[], list[int]] | None = None
        self._read_first_timestamp: Callable[[], int] | None = None

    @classmethod
    def lazy(
        cls,
        lane: Lane,
        values: list[bytes],
        *,
        first_offset: int,
        next_offset: int,
        offsets: Callable[[], list[int]] | list[int],
        keys: Callable[[], list[bytes | None]] | list[bytes | None],
        timestamps: Callable[[], list[int]] | list[int],
        nbytes: int | None = None,
        first_timestamp: Callable[[], int] | None = None,
        headers: Callable[[], list[Headers]] | None = None,
    ) -> PayloadBatch:
        """A batch over whole ``bytes`` payloads; other fields built when first read.

        ``offsets``, ``keys`` and ``timestamps`` are each a list or a function returning
        it (called at most once, on the thread that first reads the field: the pipeline
        thread). ``first_offset`` and ``next_offset`` must agree with what ``offsets()``
        returns. The views of :attr:`payloads` are made from ``values`` when first read.
        ``nbytes``, when given, is the values' total size (:meth:`payload_bytes`).
        ``first_timestamp``, when given, reads the first record's timestamp alone
        (:meth:`oldest_timestamp`), so freshness needs no list of them. ``headers``, when
        given, reads the records' headers (:attr:`headers`; else every record has none).
        """
        batch = cls.__new__(cls)
        batch._headers = None
        batch._read_headers = headers
        batch.lane = lane
        batch.next_offset = next_offset
        batch._values = values
        batch._nbytes = nbytes
        batch._payloads = None
        batch._count = len(values)
        batch._first_offset = first_offset if values else next_offset
        batch._offsets, batch._read_offsets = (
            (offsets, None) if isinstance(offsets, list) else (None, offsets)
        )
        batch._keys, batch._read_keys = (keys, None) if isinstance(keys, list) else (None, keys)
        batch._timestamps, batch._read_timestamps = (
            (timestamps, None) if isinstance(timestamps, list) else (None, timestamps)
        )
        batch._read_first_timestamp = first_timestamp if values else None
        return batch

    def positions(self) -> PayloadBatch:
        """A batch of this one's lane and offsets alone, for naming where a record was
        after the batch is gone (a row a sink refuses at write time under ``skip``,
        B349): it keeps no payload, key, timestamp or header of the records, so it holds
        none of their memory; its payloads, keys and timestamps read empty."""
        light = PayloadBatch.lazy(
            self.lane,
            [],
            first_offset=self.first_offset,
            next_offset=self.next_offset,
            offsets=self.offsets,
            keys=[],
            timestamps=[],
        )
        light._first_offset = self.first_offset  # lazy() takes it from the values
        return light

    @property
    def values(self) -> list[bytes] | None:
        """The payloads as whole ``bytes`` objects when the source holds them so, else None.

        ``values[i]`` is ``payloads[i].obj``: the same object, never a copy. Unlike the
        views, these may be kept past the batch (``bytes`` cannot change).
        """
        return self._values

    @property
    def payloads(self) -> list[memoryview]:
        payloads = self._payloads
        if payloads is None:
            values = self._values or []
            payloads = self._payloads = list(map(memoryview, values))  # type: ignore[arg-type]
        return payloads

    @property
    def offsets(self) -> list[int]:
        offsets = self._offsets
        if offsets is None:
            read = self._read_offsets
            offsets = self._offsets = read() if read is not None else []
            self._read_offsets = None
        return offsets

    @property
    def keys(self) -> list[bytes | None]:
        keys = self._keys
        if keys is None:
            read = self._read_keys
            keys = self._keys = read() if read is not None else []
            self._read_keys = None
        return keys

    @property
    def timestamps(self) -> list[int]:
        timestamps = self._timestamps
        if timestamps is None:
            read = self._read_timestamps
            timestamps = self._timestamps = read() if read is not None else []
            self._read_timestamps = None
        return timestamps

    @property
    def headers(self) -> list[Headers]:
        """Each record's :class:`Headers` (:data:`NO_HEADERS` for a source without them);
        read from the source's messages when first asked for, on the pipeline thread."""
        headers = self._headers
        if headers is None:
            read = self._read_headers
            self._read_headers = None
            headers = self._headers = read() if read is not None else [NO_HEADERS] * len(self)
        elif len(headers) < len(self):
            # An eager batch whose lists grew after it was built with fewer headers.
            headers.extend([NO_HEADERS] * (len(self) - len(headers)))
        return headers

    def oldest_timestamp(self) -> int:
        """The batch's oldest record timestamp (ms; 0 when unknown or empty), for
        freshness (B220). From the timestamps when the batch holds them; otherwise the
        first record's, where the source reads it alone (``first_timestamp``), without
        building the list nobody asked for (B97); otherwise 0."""
        timestamps = self._timestamps
        if timestamps is not None:
            return min(timestamps, default=0)
        read = self._read_first_timestamp
        return read() if read is not None else 0

    def __len__(self) -> int:
        count = self._count
        if count is None:
            return len(self.payloads)
        return count

    def __repr__(self) -> str:
        return (
            f"PayloadBatch(lane={self.lane!r}, records={len(self)}, "
            f"first_offset={self.first_offset}, next_offset={self.next_offset})"
        )

    @property
    def first_offset(self) -> int:
        first = self._first_offset
        if first is not None:
            return first
        offsets = self.offsets
        return offsets[0] if offsets else self.next_offset

    @property
    def last_offset(self) -> int:
        offsets = self.offsets
        return offsets[-1] if offsets else self.next_offset - 1

    def payload_bytes(self) -> int:
        """The payloads' total size in bytes (without building views)."""
        if self._nbytes is not None:
            return self._nbytes
        values = self._values
        return sum(map(len, values if values is not None else self.payloads))


@dataclass(frozen=True, slots=True)
class RecordMeta:
    """Where one record came from, for operators that need it (``ctx.chain(meta=True)``).

    ``headers`` are the record's :class:`Headers` (B250); ``topic`` is the lane's stream,
    the Kafka topic.
    """

    lane: Lane
    offset: int
    key: bytes | None
    timestamp_ms: int
    headers: Headers = NO_HEADERS

    @property
    def topic(self) -> str:
        """The stream the record came from (the Kafka topic)."""
        return self.lane.stream
