"""Frames through the tiers: what the spool, the memory tier and the tee share on the
columnar path (B56, B111, B151, B152).

A tier in front of a frame-taking sink (the pool) takes frames with the pool's methods
and signatures — ``takes_frames``, ``frame_needs_keys``, ``prepare_frame(frame)`` and
``offer_frame(frame, keys, lane, ack, shards=None)`` — and forwards them. A tier checks
a frame by asking the sink after it (``prepare_frame`` is forwarded, so a value the
terminal cannot take is a record error for its own record when the chain prepares the
frame, B28); what it holds and hands on is the *prepared* frame, which the sink after it
takes as it is (``offer_frame``). A tee prepares the frame once per branch
(:class:`TeeFrame`).

This module holds the pieces the tiers share: :func:`takes_frames`, the held frame
(:class:`HeldFrame`), the tee's prepared frame (:class:`TeeFrame`) and the spool's record
for a frame (:func:`encode_frame`, :func:`decode_frame`: an Arrow IPC stream per table,
with the lane and the keys, inside the store's CRC-checked batch).

Does not own: batching, acks or the store (the tiers and :mod:`spate.sink._store` do).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from spate.errors import ErrorClass, SinkError
from spate.records import Lane
from spate.sink._contract import Sink
from spate.sink._store import pack_lengths, unpack_lengths


def takes_frames(sink: Sink) -> bool:
    """Whether ``sink`` takes frames now (its ``takes_frames``, default True for a sink
    with ``offer_frame``, as the chain asks)."""
    return hasattr(sink, "offer_frame") and getattr(sink, "takes_frames", True) is True


def frame_needs_keys(sink: Sink) -> bool:
    """Whether ``sink`` needs the records' keys with a frame (a router placing by key)."""
    return getattr(sink, "frame_needs_keys", False) is True


def frame_rows(frame: object) -> int:
    """The rows of a prepared frame (an Arrow table, or a :class:`TeeFrame`)."""
    return len(frame)  # type: ignore[arg-type]


def frame_bytes(frame: object) -> int:
    """The size a prepared frame counts in a tier's ``max_bytes``."""
    if isinstance(frame, TeeFrame):
        return sum(frame_bytes(part) for part in frame.parts)
    size = getattr(frame, "nbytes", None)
    return int(size) if isinstance(size, int) else 64 * frame_rows(frame)


@dataclass(frozen=True, slots=True)
class TeeFrame:
    """A frame a tee prepared: each branch's own prepared frame, in branch order, all of
    the same rows (a record any branch refused is left out of every part)."""

    parts: tuple[object, ...]
    rows: int

    def __len__(self) -> int:
        return self.rows


@dataclass(frozen=True, slots=True)
class HeldFrame:
    """A prepared frame a tier holds: it is offered on whole, with its keys and shards,
    and counts its rows (B111: a record error in it is its own)."""

    frame: object
    keys: Sequence[bytes | None] | None
    shards: Sequence[int] | None
    rows: int


def offer_held(sink: Sink, held: HeldFrame, lane: Lane, ack: object) -> object:
    """``sink.offer_frame`` for a held frame (the frame-taking sink's own signature)."""
    return sink.offer_frame(held.frame, held.keys, lane, ack, held.shards)  # type: ignore[attr-defined]


# -- the spool's frame record ----------------------------------------------------------

FRAME_TAG = 2
"""The first byte of a frame record (a JSON record starts with ``{``, a packed run with 1)."""

_HEAD = struct.Struct("<BBIqII")
"""The tag, flags (1: keys follow), the row count, the lane's partition, the length of
its stream name and of the shape (JSON)."""

_NO_KEY = 0xFFFFFFFF


def _tables(frame: object, out: list[Any]) -> object:
    """Flatten a prepared frame into Arrow tables; return its shape (0: a table, a
    list: a :class:`TeeFrame`'s parts)."""
    if isinstance(frame, TeeFrame):
        return [_tables(part, out) for part in frame.parts]
    import pyarrow as pa

    if not isinstance(frame, pa.Table):
        raise SinkError(
            f"a spool stores frames as Arrow tables; the next tier prepared a "
            f"{type(frame).__name__}",
            ErrorClass.FATAL,
        )
    out.append(frame)
    return 0


def _rebuild(shape: object, tables: list[Any], rows: int) -> object:
    if shape == 0:
        return tables.pop(0)
    assert isinstance(shape, list)
    return TeeFrame(tuple(_rebuild(part, tables, rows) for part in shape), rows)


def check_storable(frame: object) -> None:
    """Raise ``SinkError(FATAL)`` unless the spool can store ``frame`` (pipeline thread)."""
    _tables(frame, [])


def encode_frame(frame: object, keys: Sequence[bytes | None] | None, lane: Lane) -> bytes:
    """One record for a prepared frame: the header, the lane's stream name, the shape,
    the keys (lengths then bytes, as a packed run has them) when given, then one
    length-prefixed Arrow IPC stream per table."""
    import pyarrow as pa

    tables: list[Any] = []
    shape = json.dumps(_tables(frame, tables)).encode()
    rows = frame_rows(frame)
    stream = lane.stream.encode()
    parts: list[bytes] = [
        _HEAD.pack(FRAME_TAG, keys is not None, rows, lane.partition, len(stream), len(shape)),
        stream,
        shape,
    ]
    if keys is not None:
        parts.append(pack_lengths([_NO_KEY if k is None else len(k) for k in keys], rows))
        parts += [k for k in keys if k is not None]
    for table in tables:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        data = sink.getvalue().to_pybytes()
        parts += [struct.pack("<Q", len(data)), data]
    return b"".join(parts)


def decode_frame(payload: bytes) -> tuple[object, list[bytes | None] | None, Lane]:
    """Inverse of :func:`encode_frame`: ``(frame, keys, lane)``; ``ValueError`` if malformed."""
    import pyarrow as pa

    try:
        _, keyed, rows, partition, size, shape_len = _HEAD.unpack_from(payload)
    except struct.error as exc:
        raise ValueError(f"frame record too short: {exc}") from exc
    at = _HEAD.size
    lane = Lane(payload[at : at + size].decode(), partition)
    at += size
    shape = json.loads(payload[at : at + shape_len])
    at += shape_len
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
    tables: list[Any] = []
    view = memoryview(payload)
    while at < len(payload):
        (n,) = struct.unpack_from("<Q", payload, at)
        at += 8
        if at + n > len(payload):
            raise ValueError("frame record shorter than its tables say")
        try:
            tables.append(pa.ipc.open_stream(pa.py_buffer(view[at : at + n])).read_all())
        except pa.ArrowInvalid as exc:
            raise ValueError(f"unreadable Arrow stream: {exc}") from exc
        at += n
    try:
        frame = _rebuild(shape, tables, rows)
    except (IndexError, AssertionError) as exc:
        raise ValueError("frame record's tables do not match its shape") from exc
    if tables or frame_rows(frame) != rows:
        raise ValueError("frame record's tables do not match its shape")
    return frame, keys, lane
