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
(:class:`HeldFrame`) and the tee's prepared frame (:class:`TeeFrame`); the spool's
record for a frame is in :mod:`spate.sink.tiers._spool_codec`.

Does not own: batching, acks or the store (the tiers and :mod:`spate.sink.tiers._store` do).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from spate.checkpoint._ack import AckToken
from spate.records import Lane
from spate.sink._contract import Offer, Sink, frame_needs_keys, frame_sink, takes_frames

__all__ = [
    "ForwardsFrames",
    "HeldFrame",
    "TeeFrame",
    "frame_bytes",
    "frame_needs_keys",
    "frame_rows",
    "frame_sink",
    "offer_held",
    "takes_frames",
]


def frame_rows(frame: object) -> int:
    """The rows of a prepared frame (an Arrow table, or a :class:`TeeFrame`)."""
    return len(frame)  # type: ignore[arg-type]


@runtime_checkable
class _ArrowSized(Protocol):
    """An Arrow table's size (core does not import pyarrow)."""

    nbytes: int


@runtime_checkable
class _PolarsSized(Protocol):
    """A polars frame's size (core does not import polars)."""

    def estimated_size(self) -> int: ...


def frame_bytes(frame: object) -> int:
    """The size a prepared frame counts in a tier's ``max_bytes``."""
    if isinstance(frame, TeeFrame):
        return sum(frame_bytes(part) for part in frame.parts)
    size: object = None
    if isinstance(frame, _ArrowSized):
        size = frame.nbytes
    elif isinstance(frame, _PolarsSized):
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


def offer_held(sink: Sink, held: HeldFrame, lane: Lane, ack: AckToken) -> Offer:
    """``sink.offer_frame`` for a held frame; a tier holds frames only for a
    :class:`~spate.sink.FrameSink` (``SinkError`` otherwise, :func:`frame_sink`)."""
    return frame_sink(sink, "a tier").offer_frame(held.frame, held.keys, lane, ack, held.shards)


class ForwardsFrames:
    """What a tier in front of one next sink says about frames: it takes them, and needs
    their keys, when the next sink does (the spool, the memory tier; B151, B152)."""

    next: Sink

    @property
    def takes_frames(self) -> bool:
        """Whether the tier takes frames: when the next tier does."""
        return takes_frames(self.next)

    @property
    def frame_needs_keys(self) -> bool:
        """Whether ``offer_frame`` needs the records' keys (the next tier does)."""
        return frame_needs_keys(self.next)
