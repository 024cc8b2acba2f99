"""Frames through the tiers: what the spool, the memory tier and the tee share on the
columnar path (B56, B111, B151, B152).

A tier in front of a frame-taking sink (the pool) takes frames with the pool's methods
and signatures — ``takes_frames``, ``frame_needs_keys``, ``prepare_frame(frame)`` and
``offer_frame(frame, keys, lane, ack, shards=None)`` — and forwards them:

* the memory tier and the tee check a frame by asking the sink after them
  (``prepare_frame`` is forwarded, so a value the terminal cannot take is a record error
  for its own record when the chain prepares the frame, B28), hold the *prepared* frame
  and hand it on as it is; a tee prepares the frame once per branch (:class:`TeeFrame`);
* the spool must take custody while the terminal is down (``ack: spooled``), when the
  terminal cannot check anything: it stores the chain's frame itself (an Arrow IPC
  stream) and has the next tier prepare it when it hands it on, as it does with rows
  (B102).

This module holds the pieces the tiers share: :func:`takes_frames`, the held frame
(:class:`HeldFrame`), the tee's prepared frame (:class:`TeeFrame`) and the spool's record
for a frame (:func:`encode_frame`, :func:`decode_frame`: the frame as an Arrow IPC
stream, with its lane and keys, inside the store's CRC-checked batch).

Does not own: batching, acks or the store (the tiers and :mod:`spate.sink._store` do).
"""

from __future__ import annotations

import io
import struct
from collections.abc import Sequence
from dataclasses import dataclass

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
    size = getattr(frame, "nbytes", None)  # an Arrow table
    if size is None and hasattr(frame, "estimated_size"):  # a polars frame
        size = frame.estimated_size()
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

_HEAD = struct.Struct("<BBIqIQ")
"""The tag, flags (1: keys follow), the row count, the lane's partition, the length of
its stream name and of the Arrow IPC stream."""

_NO_KEY = 0xFFFFFFFF


def encode_frame(frame: object, keys: Sequence[bytes | None] | None, lane: Lane) -> bytes:
    """One record for a chain's frame (a polars DataFrame): the header, the lane's stream
    name, the frame as an Arrow IPC stream, then the keys (lengths, then the bytes, as a
    packed run has them) when given. ``SinkError(FATAL)`` for a frame Arrow cannot hold."""
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
    head = _HEAD.pack(FRAME_TAG, keys is not None, rows, lane.partition, len(stream), len(data))
    if keys is None:
        return b"".join([head, stream, data])
    lengths = pack_lengths([_NO_KEY if k is None else len(k) for k in keys], rows)
    return b"".join([head, stream, data, lengths, *(k for k in keys if k is not None)])


def decode_frame(payload: bytes) -> tuple[object, list[bytes | None] | None, Lane]:
    """Inverse of :func:`encode_frame`: ``(frame, keys, lane)``; ``ValueError`` if malformed."""
    import polars as pl

    try:
        _, keyed, rows, partition, size, length = _HEAD.unpack_from(payload)
    except struct.error as exc:
        raise ValueError(f"frame record too short: {exc}") from exc
    at = _HEAD.size
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
    if at != len(payload):
        raise ValueError(f"frame record of {len(payload)} bytes holds {at}")
    return frame, keys, lane
