"""Tee: a sink that sends every row to each of several sinks (B58).

Each branch gets the rows of a source batch under an ack token of its own, a *branch
token* that holds the source batch's ack until the branch settled them; so a source
batch is delivered only when every branch durably wrote its rows, and fails if any
branch fails (the worst status wins, B2). The tee closes a branch token (releases its own
hold) when the source ack changes, on every tick, flush and abandon; a later row of the
same, still held, source batch gets a new branch token. Each branch token's outcome is
counted per branch in ``spate_tee_branch_records_total``.

A branch that refuses a row while another took it keeps the row in a one-row backlog of
its own (holding the branch token); the tee refuses new rows until every backlog is
handed on, so no branch is offered the same row twice and a slow branch pauses the
source (B7).

A backlogged row that its branch then refuses as bad is its own record's error (B111,
:mod:`spate.sink._held`): the row is kept with the record it came from, the chain's
record error policy is applied to that record — once, even when several branches
backlogged it — and the row leaves the backlog; the branches that took it keep it. The
record the chain is offering at the time is never charged with it. A row a branch
refuses as bad when it is first offered raises to the chain as usual (the record being
offered is that row's).

On the columnar path a tee takes frames when every branch does (B152): ``prepare_frame``
asks each branch for its own prepared frame of the same rows (:class:`TeeFrame`; a
record any branch refuses is a record error, charged once, and left out of every
branch's part), ``offer_frame`` offers each branch its part whole under its branch token,
and a branch that refuses keeps its part in its backlog (:class:`HeldFrame`), as a row.
"""

from __future__ import annotations

import functools
import logging
from collections import deque
from collections.abc import Sequence

from spate._clock import Clock, SystemClock
from spate.checkpoint._ack import AckHolds, AckStatus, AckToken
from spate.errors import ErrorClass, ErrorPolicy, SinkError
from spate.metrics import names
from spate.metrics._meter import CounterSeries, Meter
from spate.records import Lane
from spate.sink._contract import ACCEPTED, REJECTED, Offer, Sink, sink_record_policy
from spate.sink._held import HeldErrors, Origin, PendingDeadLetter, bind_held_errors, settle
from spate.sink.tiers._frames import (
    HeldFrame,
    TeeFrame,
    frame_needs_keys,
    frame_rows,
    frame_sink,
    offer_held,
    takes_frames,
)

logger = logging.getLogger(__name__)


class _BranchToken:
    """The rows of one source batch offered to one branch, under a token of their own."""

    __slots__ = ("rows", "source", "token")

    def __init__(self, source: AckToken) -> None:
        self.source = source
        self.token: AckToken
        self.rows = 0
        """Rows of ``source`` this branch accepted under ``token``."""


class _Origin:
    """The record a backlogged row came from, shared by the branches that backlogged it,
    so its record error is charged once (B111)."""

    __slots__ = ("charged", "origin")

    def __init__(self, origin: Origin | None) -> None:
        self.origin = origin
        self.charged = False


_Row = tuple[object, bytes | None, Lane, _BranchToken, _Origin]


class _Branch:
    """One branch: its sink, backlog, open branch token and counters."""

    __slots__ = ("backlog", "dead", "delivered", "failed", "open", "sink")

    def __init__(self, sink: Sink, delivered: CounterSeries, failed: CounterSeries) -> None:
        self.sink = sink
        self.backlog: deque[_Row] = deque()
        self.dead: tuple[PendingDeadLetter, _BranchToken] | None = None
        """A backlogged row's dead letter the dead-letter sink refused for now (B111)."""
        self.open: _BranchToken | None = None
        self.delivered = delivered
        self.failed = failed


class TeeSink:
    """A :class:`~spate.sink.Sink` over two or more sinks."""

    def __init__(
        self,
        name: str,
        branches: Sequence[Sink],
        *,
        clock: Clock | None = None,
        meter: Meter | None = None,
    ) -> None:
        if len(branches) < 2:
            raise ValueError(f"tee {name}: needs at least two sinks")
        self.name = name
        self.branches = list(branches)
        self.on_record_error: ErrorPolicy = sink_record_policy(branches[0])
        self._clock: Clock = clock if clock is not None else SystemClock()
        # Without a meter (a tee built by hand) the counters go to a private registry.
        meter = meter if meter is not None else Meter(name, declare=None)
        kw = {"component": name, "component_type": "tee"}
        self._branches = [
            _Branch(
                sink,
                meter.counter(
                    names.TEE_BRANCH_RECORDS, **kw, branch=sink.name, outcome="delivered"
                ),
                meter.counter(names.TEE_BRANCH_RECORDS, **kw, branch=sink.name, outcome="failed"),
            )
            for sink in branches
        ]
        self._holds = AckHolds(self)
        """The backlogs' holds: one retain and one release per branch token (B39)."""
        self._errors: HeldErrors | None = None

    def start(self) -> None:
        """Start every branch (B29)."""
        for branch in self.branches:
            branch.start()

    def bind_held_errors(self, errors: HeldErrors) -> None:
        """Charge backlogged rows' record errors through ``errors``; bind the branches
        that hold rows too (B111)."""
        self._errors = errors
        for branch in self.branches:
            bind_held_errors(branch, errors)

    def offer(self, row: object, key: bytes | None, lane: Lane, ack: AckToken) -> Offer:
        """Offer ``row`` to every branch; refused only while a backlog waits or all refuse."""
        if not self._hand_on():
            return Offer.REJECTED
        refused: list[tuple[_Branch, _BranchToken]] = []
        for branch in self._branches:
            held = branch.open
            if held is None or held.source is not ack:
                held = self._open(branch, ack)
            if branch.sink.offer(row, key, lane, held.token) is REJECTED:
                refused.append((branch, held))
            else:
                held.rows += 1
        if len(refused) == len(self._branches):
            return Offer.REJECTED
        if refused:
            errors = self._errors
            origin = _Origin(None if errors is None else errors.origin())
            for branch, held in refused:
                self._holds.add(held.token)
                branch.backlog.append((row, key, lane, held, origin))
        return ACCEPTED

    # -- columnar path (B152) ------------------------------------------------------------

    @property
    def takes_frames(self) -> bool:
        """Whether the tee takes frames: when every branch does."""
        return all(takes_frames(branch) for branch in self.branches)

    @property
    def frame_needs_keys(self) -> bool:
        """Whether :meth:`offer_frame` needs the records' keys (some branch does)."""
        return any(frame_needs_keys(branch) for branch in self.branches)

    def prepare_frame(self, frame: object) -> tuple[TeeFrame, list[tuple[int, str]]]:
        """Each branch's prepared frame of the same rows, and the rows any branch refused.

        A row one branch refuses is a record error for its record (with the first
        branch's reason, once) and is left out of every branch's part: the branches are
        asked again without it, so every part holds the same rows. Pipeline thread.
        """
        bad: dict[int, str] = {}
        while True:
            kept = [i for i in range(frame_rows(frame)) if i not in bad] if bad else None
            sub = frame if kept is None else _take(frame, kept)
            parts: list[object] = []
            found = False
            for branch in self.branches:
                prepared, refused = frame_sink(branch, f"tee {self.name}").prepare_frame(sub)
                parts.append(prepared)
                for position, reason in refused:
                    index = position if kept is None else kept[position]
                    if index not in bad:
                        bad[index] = reason
                        found = True
            if not found:
                rows = frame_rows(parts[0])
                return TeeFrame(tuple(parts), rows), sorted(bad.items())

    def offer_frame(
        self,
        frame: object,
        keys: Sequence[bytes | None] | None,
        lane: Lane,
        ack: AckToken,
        shards: Sequence[int] | None = None,
    ) -> Offer:
        """Offer each branch its part of a :class:`TeeFrame` whole (``shards`` are not
        passed on: each branch places its rows itself); refused only while a backlog
        waits or every branch refuses. Pipeline thread."""
        assert isinstance(frame, TeeFrame)
        if not frame.rows:
            return ACCEPTED
        if not self._hand_on():
            return Offer.REJECTED
        refused: list[tuple[_Branch, _BranchToken, HeldFrame]] = []
        for branch, part in zip(self._branches, frame.parts, strict=True):
            held = branch.open
            if held is None or held.source is not ack:
                held = self._open(branch, ack)
            item = HeldFrame(part, keys, None, frame_rows(part))
            if offer_held(branch.sink, item, lane, held.token) is REJECTED:
                refused.append((branch, held, item))
            else:
                held.rows += item.rows
        if len(refused) == len(self._branches):
            return Offer.REJECTED
        if refused:
            errors = self._errors
            origin = _Origin(None if errors is None else errors.origin())
            for branch, held, item in refused:
                self._holds.add(held.token)
                branch.backlog.append((item, None, lane, held, origin))
        return ACCEPTED

    def tick(self) -> None:
        self._hand_on()
        self._close_all()
        for branch in self.branches:
            branch.tick()

    def flush(self, deadline: float) -> bool:
        """Hand the backlogs on and flush every branch (drain; blocks)."""
        while not self._hand_on():
            if self._clock.monotonic() >= deadline:
                return False
            for branch in self.branches:
                branch.tick()
            self._clock.sleep(0.005)
        self._close_all()
        results = [branch.flush(deadline) for branch in self.branches]
        return all(results)

    def abandon(self) -> int:
        rows = 0
        for branch in self._branches:
            backlog = branch.backlog
            while backlog:
                self._holds.done(backlog.popleft()[3].token, ok=False)
                rows += 1
            dead, branch.dead = branch.dead, None
            if dead is not None:
                self._holds.done(dead[1].token, ok=False)
                rows += 1
        self._close_all()
        return rows + sum(branch.abandon() for branch in self.branches)

    def ready(self) -> bool:
        return all(branch.ready() for branch in self.branches)

    def close(self) -> None:
        if any(branch.backlog or branch.dead for branch in self._branches):
            self.abandon()
        self._close_all()
        for branch in self.branches:
            branch.close()

    # -- internals --------------------------------------------------------------------

    def _open(self, branch: _Branch, ack: AckToken) -> _BranchToken:
        """Close ``branch``'s open branch token and open one for ``ack``."""
        self._close(branch)
        held = _BranchToken(ack)
        settled = functools.partial(self._settled, branch, held)
        held.token = AckToken(ack.lane, ack.epoch, ack.seq, ack.next_offset, ack.records, settled)
        ack.retain(held.token)
        branch.open = held
        return held

    def _close(self, branch: _Branch) -> None:
        """Release the tee's own hold on ``branch``'s open branch token."""
        held, branch.open = branch.open, None
        if held is not None:
            held.token.release()

    def _close_all(self) -> None:
        for branch in self._branches:
            self._close(branch)

    def _settled(self, branch: _Branch, held: _BranchToken, token: AckToken, /) -> None:
        """A branch token resolved (any thread): count it, pass it to the source ack."""
        ok = token.status is AckStatus.DELIVERED
        if held.rows:
            (branch.delivered if ok else branch.failed).inc(held.rows)
        held.source.release(ok, holder=token)

    def _hand_on(self) -> bool:
        """Offer each backlog's rows to its branch; True when all backlogs are empty.

        A dead letter still waiting goes first. The branch sees each row's own record as
        the one being offered (a branch that holds rows notes it, B111).
        """
        empty = True
        errors = self._errors
        for branch in self._branches:
            dead = branch.dead
            if dead is not None:
                assert errors is not None
                if not errors.offer_again(dead[0]):
                    empty = False
                    continue
                branch.dead = None
                self._holds.done(dead[1].token)
            backlog = branch.backlog
            sink = branch.sink
            while backlog:
                row, key, lane, held, origin = backlog[0]
                outer = None if errors is None else errors.at(origin.origin)
                try:
                    if type(row) is HeldFrame:
                        offered = offer_held(sink, row, lane, held.token)
                    else:
                        offered = sink.offer(row, key, lane, held.token)
                except SinkError as exc:
                    if exc.error_class is not ErrorClass.RECORD:
                        raise
                    backlog.popleft()
                    if not self._bad_row(branch, held, origin, exc):
                        empty = False
                        break
                    continue
                finally:
                    if errors is not None:
                        errors.at(outer)
                if offered is REJECTED:
                    empty = False
                    break
                backlog.popleft()
                held.rows += row.rows if type(row) is HeldFrame else 1
                self._holds.done(held.token)
        return empty

    def _bad_row(
        self, branch: _Branch, held: _BranchToken, origin: _Origin, exc: SinkError
    ) -> bool:
        """``branch`` refused a backlogged row as bad (already off its backlog): charge
        the row's own record once (B111). False while its dead letter waits for room."""
        if origin.charged:  # another branch's backlog already charged this record
            self._holds.done(held.token)
            return True
        origin.charged = True
        release = functools.partial(self._release, held.token)
        dead = settle(self._errors, origin.origin, exc, held.source, f"tee {self.name}", release)
        if dead is None:
            return True
        branch.dead = (dead, held)
        return False

    def _release(self, token: AckToken, ok: bool) -> None:
        self._holds.done(token, ok=ok)


def _take(frame: object, rows: list[int]) -> object:
    """The rows ``rows`` of a chain's frame (a polars DataFrame), in order."""
    import polars as pl

    assert isinstance(frame, pl.DataFrame)
    return frame[rows] if rows else frame.clear()
