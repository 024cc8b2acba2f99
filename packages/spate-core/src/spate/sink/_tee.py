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
"""

from __future__ import annotations

import functools
import logging
from collections import deque
from collections.abc import Sequence

from spate._clock import Clock, SystemClock
from spate.checkpoint._ack import AckHolds, AckStatus, AckToken
from spate.errors import ErrorPolicy
from spate.metrics import names
from spate.metrics._meter import CounterSeries, Meter
from spate.records import Lane
from spate.sink._contract import ACCEPTED, REJECTED, Offer, Sink

logger = logging.getLogger(__name__)


class _BranchToken:
    """The rows of one source batch offered to one branch, under a token of their own."""

    __slots__ = ("rows", "source", "token")

    def __init__(self, source: AckToken) -> None:
        self.source = source
        self.token: AckToken
        self.rows = 0
        """Rows of ``source`` this branch accepted under ``token``."""


_Row = tuple[object, bytes | None, Lane, _BranchToken]


class _Branch:
    """One branch: its sink, backlog, open branch token and counters."""

    __slots__ = ("backlog", "delivered", "failed", "open", "sink")

    def __init__(self, sink: Sink, delivered: CounterSeries, failed: CounterSeries) -> None:
        self.sink = sink
        self.backlog: deque[_Row] = deque()
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
        self.on_record_error: ErrorPolicy = getattr(
            branches[0], "on_record_error", ErrorPolicy.FAIL
        )
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

    def start(self) -> None:
        """Start every branch (B29)."""
        for branch in self.branches:
            branch.start()

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
        for branch, held in refused:
            self._holds.add(held.token)
            branch.backlog.append((row, key, lane, held))
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
        self._close_all()
        return rows + sum(branch.abandon() for branch in self.branches)

    def ready(self) -> bool:
        return all(branch.ready() for branch in self.branches)

    def close(self) -> None:
        if any(branch.backlog for branch in self._branches):
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
        """Offer each backlog's rows to its branch; True when all backlogs are empty."""
        empty = True
        for branch in self._branches:
            backlog = branch.backlog
            sink = branch.sink
            while backlog:
                row, key, lane, held = backlog[0]
                if sink.offer(row, key, lane, held.token) is REJECTED:
                    empty = False
                    break
                backlog.popleft()
                held.rows += 1
                self._holds.done(held.token)
        return empty
