"""Tee: a sink that sends every row to each of several sinks (B58).

Each branch retains the row's ack itself, so a source batch is delivered only when every
branch durably wrote its rows, and fails if any branch fails (the worst status wins, B2).
A branch that refuses a row while another took it keeps the row in a one-row backlog of
its own (holding the ack); the tee refuses new rows until every backlog is handed on, so
no branch is offered the same row twice and a slow branch pauses the source (B7).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Sequence

from spate._clock import Clock, SystemClock
from spate.checkpoint._ack import AckHolds, AckToken
from spate.errors import ErrorPolicy
from spate.records import Lane
from spate.sink._contract import ACCEPTED, REJECTED, Offer, Sink

logger = logging.getLogger(__name__)

_Row = tuple[object, bytes | None, Lane, AckToken]


class TeeSink:
    """A :class:`~spate.sink.Sink` over two or more sinks."""

    def __init__(self, name: str, branches: Sequence[Sink], *, clock: Clock | None = None) -> None:
        if len(branches) < 2:
            raise ValueError(f"tee {name}: needs at least two sinks")
        self.name = name
        self.branches = list(branches)
        self.on_record_error: ErrorPolicy = getattr(
            branches[0], "on_record_error", ErrorPolicy.FAIL
        )
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._backlogs: list[deque[_Row]] = [deque() for _ in branches]
        self._holds = AckHolds(self)
        """One retain and one release per source ack, however many rows wait (B39)."""

    def start(self) -> None:
        """Start every branch (B29)."""
        for branch in self.branches:
            branch.start()

    def offer(self, row: object, key: bytes | None, lane: Lane, ack: AckToken) -> Offer:
        """Offer ``row`` to every branch; refused only while a backlog waits or all refuse."""
        if not self._hand_on():
            return Offer.REJECTED
        refused: list[int] = []
        for i, branch in enumerate(self.branches):
            if branch.offer(row, key, lane, ack) is REJECTED:
                refused.append(i)
        if len(refused) == len(self.branches):
            return Offer.REJECTED
        for i in refused:
            self._holds.add(ack)
            self._backlogs[i].append((row, key, lane, ack))
        return ACCEPTED

    def tick(self) -> None:
        self._hand_on()
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
        results = [branch.flush(deadline) for branch in self.branches]
        return all(results)

    def abandon(self) -> int:
        rows = 0
        for backlog in self._backlogs:
            while backlog:
                self._holds.done(backlog.popleft()[3], ok=False)
                rows += 1
        return rows + sum(branch.abandon() for branch in self.branches)

    def ready(self) -> bool:
        return all(branch.ready() for branch in self.branches)

    def close(self) -> None:
        if any(self._backlogs):
            self.abandon()
        for branch in self.branches:
            branch.close()

    def _hand_on(self) -> bool:
        """Offer each backlog's rows to its branch; True when all backlogs are empty."""
        empty = True
        for branch, backlog in zip(self.branches, self._backlogs, strict=True):
            while backlog:
                row, key, lane, ack = backlog[0]
                if branch.offer(row, key, lane, ack) is REJECTED:
                    empty = False
                    break
                backlog.popleft()
                self._holds.done(ack)
        return empty
