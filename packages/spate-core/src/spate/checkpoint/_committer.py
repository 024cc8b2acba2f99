"""The checkpointer: hands delivered watermarks to the source, on a cadence and on demand.

Every ``checkpoint.interval`` the runtime calls :meth:`Committer.maybe_commit`: the
sinks get a ``tick()`` (so partial buffers seal and their acks can resolve, B10), then
the tracker's watermarks that moved since the last commit go to
``Source.commit(offsets, sync=False)``. Revocation and drain call
:meth:`Committer.commit_now` with ``sync=True`` (B14, B15). Nothing but a tracker
watermark is ever handed to the source (B1). Runs on the pipeline thread only.

A synchronous commit on revocation that the source refuses with a non-fatal
``SourceError`` (the broker unavailable, the group moved on) is counted as
``outcome="skipped"`` and does not fail the run: the lanes are gone either way, and the
next owner replays from the last commit (B36).

Effectively-once sinks are told which positions are durably committed
(``on_committed``), so they delete the block intents below them (B89). A source that
stores asynchronous commits to send later (``DurableCommitSource``, Kafka) is asked
what its store acknowledged, on every commit and every tick; the others commit durably
inside ``commit``, so what they took is told at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from typing import Protocol, runtime_checkable

from spate._clock import Clock
from spate.checkpoint._tracker import PartitionTracker
from spate.errors import ErrorClass, SourceError
from spate.metrics import names
from spate.metrics._meter import Meter
from spate.records import Lane
from spate.source._contract import DurableCommitSource, Source


class TickedSink(Protocol):
    """What the committer needs of a sink: the checkpoint tick (B10). Sinks sit above
    this layer; every :class:`spate.sink.Sink` has it."""

    def tick(self) -> None: ...


@runtime_checkable
class CommitObservingSink(Protocol):
    """Optional part of a sink: told which positions the source's store confirmed, so an
    effectively-once sink can forget the block intents those commits passed (B89)."""

    def on_committed(self, positions: Mapping[Lane, int]) -> None: ...


logger = logging.getLogger(__name__)


class Committer:
    """Commits the contiguous delivered prefix of every lane (pipeline thread only)."""

    def __init__(
        self,
        *,
        tracker: PartitionTracker,
        source: Source,
        sinks: Mapping[str, TickedSink],
        clock: Clock,
        interval: float,
        meter: Meter,
        component: str = "checkpoint",
    ) -> None:
        self._tracker = tracker
        self._source = source
        self._sinks = sinks
        self._clock = clock
        self._interval = interval
        self._next_due = clock.monotonic() + interval
        self._committed: dict[Lane, int] = {}
        # What the source's store acknowledged, when it says so (B89), and what the sinks
        # were last told is durable.
        self._durable: Callable[[], Mapping[Lane, int]] | None = (
            source.durable_commits if isinstance(source, DurableCommitSource) else None
        )
        self._told: dict[Lane, int] = {}
        self._meter = meter
        self._component = component
        self._ok = meter.counter(
            names.CKPT_COMMITS, component=component, component_type="checkpoint", outcome="ok"
        )
        self._err = meter.counter(
            names.CKPT_COMMITS, component=component, component_type="checkpoint", outcome="error"
        )
        self._skipped = meter.counter(
            names.CKPT_COMMITS, component=component, component_type="checkpoint", outcome="skipped"
        )
        self.errors = 0

    @property
    def committed(self) -> dict[Lane, int]:
        """The last position handed to the source per lane (sync or not)."""
        return dict(self._committed)

    def forget(self, lanes: Collection[Lane]) -> None:
        """Drop lanes no longer owned, so a later owner epoch commits afresh."""
        for lane in lanes:
            self._committed.pop(lane, None)
            self._told.pop(lane, None)

    def due(self) -> bool:
        return self._clock.monotonic() >= self._next_due

    def maybe_commit(self) -> None:
        """Tick the sinks and commit moved watermarks if the interval has passed."""
        now = self._clock.monotonic()
        if now < self._next_due:
            return
        self._next_due = now + self._interval
        for sink in self._sinks.values():
            sink.tick()
        self.commit_now(sync=False)

    def commit_now(
        self,
        lanes: Collection[Lane] | None = None,
        *,
        sync: bool,
        positions: Mapping[Lane, int] | None = None,
        revoking: bool = False,
    ) -> bool:
        """Commit moved watermarks of ``lanes`` (all owned lanes when None).

        ``positions`` overrides the tracker (the revoke path passes the final
        watermarks it took from :meth:`PartitionTracker.revoke`). Returns False when the
        source's commit raised; the error is logged and counted. With ``revoking``, a
        non-fatal ``SourceError`` is counted as skipped and returns True: the revocation
        completes without the commit (B36).
        """
        marks = dict(positions) if positions is not None else self._tracker.watermarks(lanes)
        if sync:
            # A synchronous commit covers every lane asked for, moved or not: an earlier
            # asynchronous hand-over may only have been stored by the source (Kafka's
            # commit cadence), and revoke and drain must leave them committed (B14, B15).
            moved = marks
        else:
            moved = {lane: pos for lane, pos in marks.items() if self._committed.get(lane) != pos}
        if not moved:
            self._tell_durable({})
            return True
        try:
            self._source.commit(moved, sync=sync)
        except SourceError as exc:
            if not revoking or exc.error_class is ErrorClass.FATAL:
                self._failed(len(moved), sync)
                return False
            self._skipped.inc()
            logger.warning(
                "commit on revocation of %s not possible, the revocation completes without "
                "it and the next owner replays from the last commit: %s",
                ", ".join(map(str, sorted(moved))),
                exc.reason,
            )
            return True
        except Exception:
            self._failed(len(moved), sync)
            return False
        self._ok.inc()
        self._committed.update(moved)
        self._measure_committed()
        self._tell_durable(moved)
        logger.debug("committed %s (sync=%s)", moved, sync)
        return True

    def _measure_committed(self) -> None:
        """Written → committed for every batch the commit just passed (B221)."""
        passed = self._tracker.take_passed()
        if not passed:
            return
        now = self._clock.time()
        freshness = self._meter.freshness
        for written, records in passed:
            for (sink, table), at in written.items():
                freshness.series(
                    names.CKPT_WRITTEN_TO_COMMITTED.name,
                    component=sink,
                    component_type="sink",
                    table=table,
                ).observe(now - at, records, now)

    def _tell_durable(self, taken: Mapping[Lane, int]) -> None:
        """Tell the sinks the durably committed positions that moved (B89).

        ``taken`` is what the source just took. With a ``DurableCommitSource`` only what
        its store acknowledged counts: an asynchronous Kafka commit is sent later and may
        be refused, and intents deleted below it would be missing from a replay after a
        kill -9 (the rows cut again under other tokens: duplicates).
        """
        durable = self._durable() if self._durable is not None else taken
        told = self._told
        moved = {lane: pos for lane, pos in durable.items() if told.get(lane) != pos}
        if not moved:
            return
        told.update(moved)
        for sink in self._sinks.values():
            # Effectively-once sinks delete the block intents a commit has passed (B89).
            if isinstance(sink, CommitObservingSink):
                sink.on_committed(moved)

    def _failed(self, lanes: int, sync: bool) -> None:
        """Count and log the commit that just raised (called inside its ``except``)."""
        self.errors += 1
        self._err.inc()
        logger.exception("commit of %d lane(s) failed (sync=%s)", lanes, sync)
