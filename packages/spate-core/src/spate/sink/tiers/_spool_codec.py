"""The spool's codec: the records a spooled batch holds, for rows and for frames.

A record is any bytes to the store (:mod:`spate.sink.tiers._store`); the spool writes three
kinds, told apart by their first byte:

* a packed run (``0x01``, :func:`pack_run`): a run of one lane's raw ``bytes`` rows,
  lengths then payloads, no per-row encoding (B101);
* a JSON record (``{``, :func:`encode_record`): one row of any other kind;
* a frame record (``0x02``, :func:`encode_frame`): a frame of
  the columnar path as an Arrow IPC stream (B151), :func:`encode_frame`.

Each kind may carry its rows' source offsets (B421): a JSON record an ``"o"`` member, a
packed run and a frame record a flag bit (``OFFSETS``) in their header with one signed
64-bit offset per row. A record written before offsets were kept has neither and reads
back with no offsets (None), so a spool directory written by an earlier version replays
as before; the flag is the format's version mark, and nothing else in a record moved.

:func:`encode_batch` and :func:`decode_runs` encode and read a batch's rows
(:func:`decode_records` without the offsets). Does not own: batches, acks, the store or
the writer thread (:mod:`spate.sink.tiers._spool`).
"""

from __future__ import annotations

import datetime
import decimal
import functools
import io
import json
import struct
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence

from spate.errors import ErrorClass, SinkError
from spate.records import Lane
from spate.sink.tiers._store import pack_lengths, unpack_lengths


def _tagged(value: object) -> object:
    """JSON for the values rows commonly carry beyond plain JSON (tagged, one key)."""
    if isinstance(value, datetime.datetime):
        return {"$dt": value.isoformat()}
    if isinstance(value, datetime.date):
        return {"$date": value.isoformat()}
    if isinstance(value, decimal.Decimal):
        return {"$dec": str(value)}
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$b": bytes(value).decode("latin-1")}
    if isinstance(value, (set, frozenset)):
        return list(value)
    raise TypeError(f"{type(value).__name__} cannot be spooled as JSON")


_UNTAG: dict[str, Callable[[str], object]] = {
    "$dt": datetime.datetime.fromisoformat,
    "$date": datetime.date.fromisoformat,
    "$dec": decimal.Decimal,
    "$b": lambda text: text.encode("latin-1"),
}


def _untag(obj: dict[str, object]) -> object:
    if len(obj) == 1:
        ((key, value),) = obj.items()
        convert = _UNTAG.get(key)
        if convert is not None and isinstance(value, str):
            return convert(value)
    return obj


@functools.cache
def _orjson_encoders() -> tuple[Callable[[object], bytes], Callable[[str], bytes]] | None:
    """orjson's encoder for rows (tags, non-string keys; the same output as the standard
    library's) and its plain one for strings, if installed.

    Imported on first use: importing spate loads no optional library."""
    try:
        import orjson
    except ImportError:  # pragma: no cover - orjson comes with the json and kafka extras
        return None
    options = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_NON_STR_KEYS
    return functools.partial(orjson.dumps, default=_tagged, option=options), orjson.dumps


_PREFIXES: dict[Lane, bytes] = {}
"""``{"s":<stream>,"p":<partition>,`` per lane: encoded once, not once per row."""


def _lane_prefix(lane: Lane, dumps: Callable[[object], bytes]) -> bytes:
    if len(_PREFIXES) >= 65536:
        _PREFIXES.clear()
    prefix = _PREFIXES[lane] = b'{"s":%s,"p":%d,' % (dumps(lane.stream), lane.partition)
    return prefix


def encode_record(row: object, key: bytes | None, lane: Lane, offset: int | None = None) -> bytes:
    """The spool's JSON payload for one row; ``SinkError(RECORD)`` if it cannot be spooled.

    Rows are JSON values; ``datetime``, ``date``, ``Decimal`` and ``bytes`` values are
    kept through one-key tagged objects, a ``UUID`` becomes its text, and a tuple row
    stays a tuple. The payload is
    ``{"s":stream,"p":partition[,"o":offset][,"k":key],<slot>:value}`` with the slot
    ``b`` (raw bytes), ``t`` (a tuple) or ``r`` (any other row); ``o`` is the row's
    source offset when known (B421). orjson encodes when installed (the same output; the
    lane's part is encoded once per lane), else the standard library.
    """
    encoders = _orjson_encoders()
    if encoders is None:
        return _encode_with_json(row, key, lane, offset)
    dumps, dumps_str = encoders
    prefix = _PREFIXES.get(lane)
    if prefix is None:
        prefix = _lane_prefix(lane, dumps)
    if offset is not None:
        prefix = b'%s"o":%d,' % (prefix, offset)
    try:
        if type(row) is bytes:
            value = b'"b":' + dumps_str(row.decode("latin-1"))
        elif isinstance(row, (bytes, bytearray, memoryview)):
            value = b'"b":' + dumps_str(bytes(row).decode("latin-1"))
        elif type(row) is tuple:
            value = b'"t":' + dumps(row)
        else:
            value = b'"r":' + dumps(row)
    except (TypeError, ValueError) as exc:
        raise SinkError(f"spool: row cannot be spooled: {exc}", ErrorClass.RECORD) from exc
    if key is None:
        return b"%s%s}" % (prefix, value)
    return b'%s"k":%s,%s}' % (prefix, dumps_str(key.decode("latin-1")), value)


def row_payload(row: object) -> bytes:
    """A spooled row as a record's payload (a dead letter's, B323): a ``bytes`` row as it
    is, any other as the JSON value the spool keeps it as, without its lane and key."""
    if isinstance(row, (bytes, bytearray, memoryview)):
        return bytes(row)
    encoders = _orjson_encoders()
    if encoders is not None:
        return encoders[0](row)
    text = json.dumps(row, separators=(",", ":"), ensure_ascii=False, default=_tagged)
    return text.encode()


_PACKED = 1
"""The first byte of a packed run record (a JSON record starts with ``{``)."""

_RUN = struct.Struct("<BBIqI")
"""A packed run's header: the tag, flags (1: keys follow; :data:`OFFSETS`: offsets
follow), the row count, the lane's partition and the length of its stream name."""

_KEYED = 1
OFFSETS = 2
"""The header flag of a packed run or frame record that carries its rows' source
offsets (B421); a record written without it (an older spool) has none."""


def _pack_offsets(offsets: Sequence[int], count: int) -> bytes:
    if len(offsets) != count:
        raise ValueError(f"{len(offsets)} offsets for {count} rows")
    return struct.pack(f"<{count}q", *offsets)


def _unpack_offsets(payload: bytes, at: int, count: int) -> list[int]:
    end = at + 8 * count
    if end > len(payload):
        raise ValueError("record shorter than its offsets")
    return list(struct.unpack_from(f"<{count}q", payload, at))


_NO_KEY = 0xFFFFFFFF
"""The key length that stands for no key in a packed run."""


def pack_run(
    rows: Sequence[bytes],
    keys: Sequence[bytes | None],
    lane: Lane,
    offsets: Sequence[int] | None = None,
) -> bytes:
    """One record for a run of raw ``bytes`` rows of one lane, without JSON.

    The header, the lane's stream name, the rows' lengths (one ``u32`` each), the keys'
    lengths when any row has a key (``0xFFFFFFFF`` for none), the rows' source offsets
    (one ``i64`` each) when given (B421), then the rows and the keys back to back: one
    join, no per-row Python work unless some rows have keys and some have none. Raises
    ``struct.error`` or ``UnicodeEncodeError`` for what it cannot hold (the caller
    encodes such a run as JSON)."""
    stream = lane.stream.encode()
    count = len(rows)
    unkeyed = keys.count(None)
    flags = (_KEYED if unkeyed != count else 0) | (OFFSETS if offsets is not None else 0)
    head = _RUN.pack(_PACKED, flags, count, lane.partition, len(stream))
    lengths = pack_lengths(map(len, rows), count)
    at = b"" if offsets is None else _pack_offsets(offsets, count)
    if unkeyed == count:
        return b"".join([head, stream, lengths, at, *rows])
    if not unkeyed:  # every row has a key (a keyed Kafka topic): no per-row Python work
        key_lengths = pack_lengths(map(len, keys), count)  # type: ignore[arg-type]
        present: Sequence[bytes | None] = keys
    else:
        key_lengths = pack_lengths([_NO_KEY if k is None else len(k) for k in keys], count)
        present = [k for k in keys if k is not None]
    return b"".join([head, stream, lengths, key_lengths, at, *rows, *present])  # type: ignore[list-item]


def unpack_run(
    payload: bytes,
) -> tuple[list[bytes], list[bytes | None], Lane, list[int] | None]:
    """Inverse of :func:`pack_run`: ``(rows, keys, lane, offsets)`` — offsets None for a
    run written without them; ``ValueError`` if malformed."""
    try:
        _, flags, count, partition, size = _RUN.unpack_from(payload)
    except struct.error as exc:
        raise ValueError(f"packed run too short: {exc}") from exc
    keyed = flags & _KEYED
    at = _RUN.size + size
    lane = Lane(payload[_RUN.size : at].decode(), partition)
    lengths = unpack_lengths(payload[at : at + 4 * count])
    at += 4 * count
    key_lengths = unpack_lengths(payload[at : at + 4 * count]) if keyed else None
    if keyed:
        at += 4 * count
    if len(lengths) != count or (key_lengths is not None and len(key_lengths) != count):
        raise ValueError("packed run shorter than its header says")
    offsets: list[int] | None = None
    if flags & OFFSETS:
        offsets = _unpack_offsets(payload, at, count)
        at += 8 * count
    rows: list[bytes] = []
    for n in lengths:
        rows.append(payload[at : at + n])
        at += n
    keys: list[bytes | None] = [None] * count
    if key_lengths is not None:
        for i, n in enumerate(key_lengths):
            if n != _NO_KEY:
                keys[i] = payload[at : at + n]
                at += n
    if at != len(payload):
        raise ValueError(f"packed run of {len(payload)} bytes holds {at}")
    return rows, keys, lane, offsets


def encode_batch(
    rows: Sequence[object],
    keys: Sequence[bytes | None],
    runs: Sequence[tuple[int, Lane]],
    encoded: dict[int, bytes],
    offsets: Sequence[int] | None = None,
) -> list[bytes]:
    """The records of a batch: ``rows[i]`` with ``keys[i]`` (and source offset
    ``offsets[i]`` when given, B421) in the lane of the run it falls in (``runs``: the
    first index and lane of each run of one lane's rows), or ``encoded[i]`` for a row
    encoded when it was offered (with its offset).

    A run of raw ``bytes`` rows only (what a pipeline without a deserializer spools) is
    one packed record (:func:`pack_run`); a run with other rows is one JSON record per
    row, the bytes :func:`encode_record` gives each. :func:`decode_records` reads both.
    """
    n = len(rows)
    bounds = [*(start for start, _ in runs[1:]), n]
    records: list[bytes] = []
    for (start, lane), end in zip(runs, bounds, strict=True):
        whole = start == 0 and end == n
        if not encoded or not any(start <= i < end for i in encoded):
            try:
                records.append(
                    pack_run(
                        rows if whole else rows[start:end],  # type: ignore[arg-type]
                        keys if whole else keys[start:end],
                        lane,
                        None if offsets is None else offsets[start:end],
                    )
                )
                continue
            except (struct.error, UnicodeEncodeError, TypeError):
                pass  # a lane or row a packed run cannot hold: JSON below
        records += [
            encoded[i]
            if i in encoded
            else encode_record(rows[i], keys[i], lane, None if offsets is None else offsets[i])
            for i in range(start, end)
        ]
    return records


Run = tuple[list[object], list[bytes | None], Lane, list[int] | None]
"""Rows of one lane as :func:`decode_runs` reads them: rows, keys, lane and the rows'
source offsets (None when the records were written without them)."""


def decode_runs(records: Iterable[bytes]) -> Iterator[Run]:
    """The rows of a batch's records (:func:`encode_batch`), as ``(rows, keys, lane,
    offsets)`` runs; a JSON record is a run of one row. ``ValueError`` for a record
    neither reads."""
    for payload in records:
        if payload[:1] == b"{":
            row, key, lane, offset = decode_positioned(payload)
            yield [row], [key], lane, None if offset is None else [offset]
        elif payload[:1] == b"\x01":
            yield unpack_run(payload)  # type: ignore[misc]
        else:
            raise ValueError(f"a record starting with {payload[:1]!r} is neither JSON nor packed")


def decode_records(
    records: Iterable[bytes],
) -> Iterator[tuple[list[object], list[bytes | None], Lane]]:
    """:func:`decode_runs` without the offsets: ``(rows, keys, lane)`` runs."""
    for rows, keys, lane, _ in decode_runs(records):
        yield rows, keys, lane


def _encode_with_json(
    row: object, key: bytes | None, lane: Lane, offset: int | None = None
) -> bytes:
    """:func:`encode_record` with the standard library's encoder."""
    body: dict[str, object] = {"s": lane.stream, "p": lane.partition}
    if offset is not None:
        body["o"] = offset
    if key is not None:
        body["k"] = key.decode("latin-1")
    if isinstance(row, (bytes, bytearray, memoryview)):
        body["b"] = bytes(row).decode("latin-1")
    elif type(row) is tuple:
        body["t"] = row
    else:
        body["r"] = row
    try:
        text = json.dumps(body, separators=(",", ":"), ensure_ascii=False, default=_tagged)
    except (TypeError, ValueError) as exc:
        raise SinkError(f"spool: row cannot be spooled: {exc}", ErrorClass.RECORD) from exc
    return text.encode()


def decode_positioned(payload: bytes) -> tuple[object, bytes | None, Lane, int | None]:
    """Inverse of :func:`encode_record`: ``(row, key, lane, offset)``, the offset None
    for a record written without one."""
    body = json.loads(payload, object_hook=_untag)
    key = body.get("k")
    if "b" in body:
        row: object = body["b"].encode("latin-1")
    elif "t" in body:
        row = tuple(body["t"])
    else:
        row = body.get("r")
    offset = body.get("o")
    lane = Lane(body["s"], body["p"])
    return row, None if key is None else key.encode("latin-1"), lane, offset


def decode_record(payload: bytes) -> tuple[object, bytes | None, Lane]:
    """Inverse of :func:`encode_record` without the offset: ``(row, key, lane)``."""
    row, key, lane, _ = decode_positioned(payload)
    return row, key, lane


# -- the spool's frame record ----------------------------------------------------------

FRAME_TAG = 2
"""The first byte of a frame record (a JSON record starts with ``{``, a packed run with 1)."""

_FRAME_HEAD = struct.Struct("<BBIqIQ")
"""The tag, flags (1: keys follow; :data:`OFFSETS`: offsets follow), the row count, the
lane's partition, the length of its stream name and of the Arrow IPC stream."""


def encode_frame(
    frame: object,
    keys: Sequence[bytes | None] | None,
    lane: Lane,
    offsets: Sequence[int] | None = None,
) -> bytes:
    """One record for a chain's frame (a polars DataFrame): the header, the lane's stream
    name, the frame as an Arrow IPC stream, then the keys (lengths, then the bytes, as a
    packed run has them) when given, then the rows' source offsets (one ``i64`` each)
    when given (B421). ``SinkError(FATAL)`` for a frame Arrow cannot hold."""
    import polars as pl

    if not isinstance(frame, pl.DataFrame):
        raise SinkError(
            f"a spool stores polars frames, not {type(frame).__name__}", ErrorClass.FATAL
        )
    out = io.BytesIO()
    try:
        frame.write_ipc_stream(out)
    except Exception as exc:  # polars raises its own errors for Object columns and the like
        raise SinkError(f"a frame cannot be spooled: {exc}", ErrorClass.FATAL) from exc
    data = out.getvalue()
    rows = frame.height
    stream = lane.stream.encode()
    flags = (_KEYED if keys is not None else 0) | (OFFSETS if offsets is not None else 0)
    head = _FRAME_HEAD.pack(FRAME_TAG, flags, rows, lane.partition, len(stream), len(data))
    at = b"" if offsets is None else _pack_offsets(offsets, rows)
    if keys is None:
        return b"".join([head, stream, data, at])
    lengths = pack_lengths([_NO_KEY if k is None else len(k) for k in keys], rows)
    return b"".join([head, stream, data, lengths, *(k for k in keys if k is not None), at])


def decode_frame(payload: bytes) -> tuple[object, list[bytes | None] | None, Lane]:
    """Inverse of :func:`encode_frame` without the offsets: ``(frame, keys, lane)``."""
    frame, keys, lane, _ = decode_positioned_frame(payload)
    return frame, keys, lane


def decode_positioned_frame(
    payload: bytes,
) -> tuple[object, list[bytes | None] | None, Lane, list[int] | None]:
    """Inverse of :func:`encode_frame`: ``(frame, keys, lane, offsets)``, the offsets
    None for a record written without them; ``ValueError`` if malformed."""
    import polars as pl

    try:
        _, flags, rows, partition, size, length = _FRAME_HEAD.unpack_from(payload)
    except struct.error as exc:
        raise ValueError(f"frame record too short: {exc}") from exc
    keyed = flags & _KEYED
    at = _FRAME_HEAD.size
    lane = Lane(payload[at : at + size].decode(), partition)
    at += size
    if at + length > len(payload):
        raise ValueError("frame record shorter than its header says")
    try:
        frame = pl.read_ipc_stream(io.BytesIO(payload[at : at + length]))
    except Exception as exc:  # polars' own error types
        raise ValueError(f"unreadable Arrow stream: {exc}") from exc
    at += length
    if frame.height != rows:
        raise ValueError(f"frame record of {rows} rows holds {frame.height}")
    keys: list[bytes | None] | None = None
    if keyed:
        lengths = unpack_lengths(payload[at : at + 4 * rows])
        at += 4 * rows
        if len(lengths) != rows:
            raise ValueError("frame record shorter than its header says")
        keys = [None] * rows
        for i, n in enumerate(lengths):
            if n != _NO_KEY:
                keys[i] = payload[at : at + n]
                at += n
    offsets: list[int] | None = None
    if flags & OFFSETS:
        offsets = _unpack_offsets(payload, at, rows)
        at += 8 * rows
    if at != len(payload):
        raise ValueError(f"frame record of {len(payload)} bytes holds {at}")
    return frame, keys, lane, offsets
