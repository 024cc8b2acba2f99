"""The memory tier: a sink that holds rows in memory until its flush policy fires.

Rows are held with the ack of the source batch they came from (retained once per row)
and handed to the next tier when ``max_records`` or ``max_bytes`` is reached, when the
oldest held row is ``every`` old (checked on tick), at every tick with ``on_tick``, and
on flush (drain, revocation). The next tier retains the same ack before the memory tier
lets go of it, so a source batch is never acknowledged before its rows reached a durable tier or the
terminal (ADR 0005). Volatile: a crash loses what it holds, which the source then
replays — hence it may only stand before a spool, never after (config validation).

A held row the next tier refuses as bad when it is handed on is its own record's error
(B111, :mod:`spate.sink._held`): each row is held with the record it came from, the
chain's record error policy is applied to that record once, and the row leaves the tier
— the record being offered when the flush goes on is never charged with it, and the
other rows of the flush are handed on.

On the columnar path the tier takes frames as the pool does (B152): ``prepare_frame``
is the next tier's, so a value it cannot take is a record error of its own record when
the chain prepares the frame; the prepared frame is held whole (:class:`HeldFrame`, its
rows counting toward ``max_records``) and handed on whole with ``offer_frame``. A record
error the next tier raises for a held frame is the frame's own, never the record being
offered then's (B111).
"""

from __future__ import annotations

import functools
import logging
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from spate._clock import Clock
from spate.checkpoint._ack import AckHolds, AckToken
from spate.config._decode import ByteSize, Duration
from spate.errors import ErrorClass, ErrorPolicy, SinkError
from spate.metrics import names
from spate.metrics._meter import Meter
from spate.records import Lane
from spate.sink._contract import ACCEPTED, Offer, Sink, sink_record_policy
from spate.sink._held import HeldErrors, Origin, PendingDeadLetter, bind_held_errors, settle
from spate.sink._writer import estimate_row_bytes
from spate.sink.tiers._frames import (
    ForwardsFrames,
    HeldFrame,
    frame_bytes,
    frame_rows,
    frame_sink,
    offer_held,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryTierConfig:
    """``memory:`` — a tier that batches rows in memory before the next tier."""

    max_records: int = 10_000
    """Hand everything on once this many rows are held."""
    max_bytes: ByteSize = 64 * 1024 * 1024
    """Hand everything on once the held rows' estimated size reaches this."""
    every: Duration = 60.0
    """Hand everything on once the oldest held row is this old."""
    on_tick: bool = False
    """Also hand everything on at every checkpoint tick (``checkpoint.interval``)."""

    def config_errors(self) -> Iterator[tuple[str, str]]:
        if self.max_records < 1:
            yield "max_records", "must be at least 1"
        if self.max_bytes < 1:
            yield "max_bytes", "must be positive"
        if self.every <= 0:
            yield "every", "must be positive"


_Held = tuple[object, bytes | None, Lane, AckToken, int, Origin | None]
"""A held row: row, key, lane, source ack, estimated size, the record it came from."""


class MemoryTier(ForwardsFrames):
    """A :class:`~spate.sink.Sink` holding rows in memory in front of ``next``."""

    def __init__(
        self,
        name: str,
        config: MemoryTierConfig,
        next_tier: Sink,
        *,
        meter: Meter,
        clock: Clock,
    ) -> None:
        self.name = name
        self.config = config
        self.next = next_tier
        self.on_record_error: ErrorPolicy = sink_record_policy(next_tier)
        self._clock = clock
        self._held: deque[_Held] = deque()
        self._holds = AckHolds(self)
        """One retain and one release per source ack, however many of its rows wait (B39)."""
        self._bytes = 0
        self._frame_rows = 0
        """Rows of held frames beyond one per frame (``len(_held)`` counts a frame once)."""
        self._oldest = 0.0
        self._flushing = False
        self._errors: HeldErrors | None = None
        self._dead: PendingDeadLetter | None = None
        """A held row's dead letter the dead-letter sink refused for now (B111)."""
        kw = {"component": name, "component_type": "memory_tier"}
        self._m_records = meter.gauge(names.TIER_HELD_RECORDS, **kw)
        self._m_bytes = meter.gauge(names.TIER_HELD_BYTES, **kw)
        self._m_oldest = meter.gauge(names.TIER_OLDEST_AGE, **kw)
        self._m_flushes = meter.counter(names.TIER_FLUSHES, **kw)

    def start(self) -> None:
        """Start the next tier (B29)."""
        self.next.start()

    def bind_held_errors(self, errors: HeldErrors) -> None:
        """Charge held rows' record errors through ``errors``; bind the next tier (B111)."""
        self._errors = errors
        bind_held_errors(self.next, errors)

    def offer(self, row: object, key: bytes | None, lane: Lane, ack: AckToken) -> Offer:
        """Hold ``row``; refuse while an earlier flush is still being handed on (B7)."""
        if self._flushing:
            self._hand_on()
            if self._flushing:
                if type(row) is HeldFrame:
                    self._frame_rows -= row.rows - 1
                return Offer.REJECTED
        size = frame_bytes(row.frame) if type(row) is HeldFrame else estimate_row_bytes(row)
        self._holds.add(ack)
        if not self._held:
            self._oldest = self._clock.monotonic()
        errors = self._errors
        origin = None if errors is None else errors.origin()
        self._held.append((row, key, lane, ack, size, origin))
        self._bytes += size
        cfg = self.config
        if len(self._held) + self._frame_rows >= cfg.max_records or self._bytes >= cfg.max_bytes:
            self._start_flush()
        return ACCEPTED

    # -- columnar path (B152) ------------------------------------------------------------

    def prepare_frame(self, frame: object) -> tuple[object, list[tuple[int, str]]]:
        """The next tier's check of a frame (record errors now, for their own records)."""
        return frame_sink(self.next, f"memory tier {self.name}").prepare_frame(frame)

    def offer_frame(
        self,
        frame: object,
        keys: Sequence[bytes | None] | None,
        lane: Lane,
        ack: AckToken,
        shards: Sequence[int] | None = None,
    ) -> Offer:
        """Hold a prepared frame whole; refuse while an earlier flush is being handed on."""
        rows = frame_rows(frame)
        if not rows:
            return ACCEPTED
        held = HeldFrame(frame, keys, shards, rows)
        self._frame_rows += rows - 1
        return self.offer(held, None, lane, ack)

    def tick(self) -> None:
        """Checkpoint tick: hand on when ``every`` elapsed (or ``on_tick``); tick the next tier."""
        due = self.config.on_tick or self._clock.monotonic() - self._oldest >= self.config.every
        if self._held and due:
            self._start_flush()
        elif self._flushing:
            self._hand_on()
        self.next.tick()
        self._gauges()

    def flush(self, deadline: float) -> bool:
        """Hand everything on and flush the next tier (drain, revocation; blocks)."""
        if self._held:
            self._start_flush()
        while self._flushing:
            if self._clock.monotonic() >= deadline:
                return False
            self.next.tick()
            self._clock.sleep(0.005)
            self._hand_on()
        self._gauges()
        return self.next.flush(deadline)

    def abandon(self) -> int:
        """Fail the acks of the rows still held (B4), then the next tier's."""
        rows = len(self._held) + self._frame_rows
        self._frame_rows = 0
        while self._held:
            self._holds.done(self._held.popleft()[3], ok=False)
        dead, self._dead = self._dead, None
        if dead is not None:
            rows += 1
            self._holds.done(dead.ack, ok=False)
        self._bytes = 0
        self._flushing = False
        if rows:
            logger.warning("memory tier %s abandoned %d rows", self.name, rows)
        return rows + self.next.abandon()

    def ready(self) -> bool:
        return self.next.ready()

    def close(self) -> None:
        if self._held or self._dead is not None:
            self.abandon()
        self.next.close()

    def _start_flush(self) -> None:
        self._flushing = True
        self._m_flushes.inc()
        self._hand_on()

    def _hand_on(self) -> None:
        """Hand held rows on until the next tier refuses one (pipeline thread).

        A dead letter still waiting goes first. The next tier sees each row's own record
        as the one being offered, so a tier after this one that holds rows notes it.
        """
        dead = self._dead
        if dead is not None:
            assert self._errors is not None
            if not self._errors.offer_again(dead):
                return
            self._dead = None
            self._holds.done(dead.ack)
        held = self._held
        nxt = self.next
        errors = self._errors
        while held:
            row, key, lane, ack, size, origin = held[0]
            outer = None if errors is None else errors.at(origin)
            try:
                if type(row) is HeldFrame:
                    offered = offer_held(nxt, row, lane, ack)
                else:
                    offered = nxt.offer(row, key, lane, ack)
            except SinkError as exc:
                self._taken(held.popleft())
                self._bytes -= size
                if exc.error_class is not ErrorClass.RECORD:
                    self._holds.done(ack, ok=False)
                    raise
                if not self._bad_row(origin, exc, ack):
                    return
                continue
            finally:
                if errors is not None:
                    errors.at(outer)
            if offered is Offer.REJECTED:
                return
            self._taken(held.popleft())
            self._bytes -= size
            self._holds.done(ack)
        self._flushing = False

    def _taken(self, item: _Held) -> None:
        """A held row or frame left the tier: its frame's rows stop counting."""
        row = item[0]
        if type(row) is HeldFrame:
            self._frame_rows -= row.rows - 1

    def _bad_row(self, origin: Origin | None, exc: SinkError, ack: AckToken) -> bool:
        """The next tier refused a held row as bad (already taken off the queue): charge
        its own record (B111). False while its dead letter waits for room."""
        release = functools.partial(self._release, ack)
        self._dead = settle(self._errors, origin, exc, ack, f"memory tier {self.name}", release)
        return self._dead is None

    def _release(self, ack: AckToken, ok: bool) -> None:
        self._holds.done(ack, ok=ok)

    def _gauges(self) -> None:
        self._m_records.set(len(self._held) + self._frame_rows)
        self._m_bytes.set(self._bytes)
        age = self._clock.monotonic() - self._oldest if self._held else 0.0
        self._m_oldest.set(age)
