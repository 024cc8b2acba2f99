"""The pipeline runtime: the poll loop, the batch backlog, pauses, checkpoints and drain.

One :class:`PipelineRuntime` runs one pipeline on the calling thread (the pipeline
thread). Each loop turn (:meth:`PipelineRuntime.step`):

1. resumes the batch that stalled last time, from its cursor (B8);
2. fails the pipeline if a lane's head batch has been failed for
   ``stalled_fail_after`` (B5);
3. works out which lanes must be paused — all of them while the byte budget is over
   ``high_ratio`` (until under ``low_ratio`` after ``min_pause``) or a batch is stalled,
   otherwise the lanes at ``max_pending_batches``; but not, unless a batch is stalled, a
   lane whose replayed block waits for its rows (B121) — and tells the source (B6, B7);
4. polls (the source keeps being polled while paused, so group membership stays alive);
5. registers each polled batch with the tracker and runs the processor on it;
6. commits on the checkpoint cadence.

Sink workers resolve acks on their own threads; the runtime only reads the tracker. The
end of a run (signal, end of a bounded source, failure) and every revocation go through
the drain routine in :mod:`spate.pipeline._drain` (B14, B15). Per batch work only —
nothing here loops over records except a C-level byte count.

A bounded source may take back its ``drained()`` when a rebalance hands it lanes it has
not read (``undrained()``, B34); the run then goes on until it drains again. Liveness also
watches every lane the source reports behind (``FetchLagSource``): owned, not paused by
spate, and nothing polled from it for ``lane_stall_after`` means fetching stopped behind
spate's back (B32).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from spate._clock import Clock, SystemClock
from spate.checkpoint._ack import AckToken
from spate.checkpoint._committer import Committer
from spate.checkpoint._tracker import PartitionTracker
from spate.config.models import BackpressureConfig, CheckpointConfig, ReadinessConfig
from spate.errors import ErrorClass, FatalError, SourceError, SpateError
from spate.flow._budget import InflightBudget
from spate.flow._gate import PendingGate
from spate.flow._watermark import Hysteresis
from spate.metrics import names
from spate.metrics._meter import CounterSeries, GaugeSeries, Meter
from spate.ops._contract import BatchProcessor, ReportsSkips, Stalled
from spate.pipeline._drain import write_out
from spate.pipeline._exit import ExitReport
from spate.pipeline._signals import ShutdownHandle
from spate.pipeline._status import StatusLine
from spate.records import Lane, PayloadBatch
from spate.sink._contract import ReplayingSink, RevocationAwareSink, Sink
from spate.source._contract import AssignmentWaitSource, FetchLagSource, Source

logger = logging.getLogger(__name__)

_GAUGE_INTERVAL = 1.0
"""Seconds between refreshes of the per-lane gauges (pending, watermark age, in-flight)."""


@dataclass(slots=True)
class _Taken:
    """A polled batch the processor has not finished: its ack and resume cursor."""

    batch: PayloadBatch
    ack: AckToken
    cursor: object | None = None


@dataclass(slots=True)
class _LaneMetrics:
    records: CounterSeries
    bytes: CounterSeries
    pending: GaugeSeries
    lag: GaugeSeries
    age: GaugeSeries


class PipelineRuntime:
    """Runs one pipeline on the calling thread; implements ``SourceEvents`` and health."""

    def __init__(
        self,
        *,
        name: str,
        source: Source,
        sinks: Mapping[str, Sink],
        processor: BatchProcessor,
        checkpoint: CheckpointConfig,
        backpressure: BackpressureConfig,
        clock: Clock,
        meter: Meter,
        budget: InflightBudget,
        shutdown: ShutdownHandle,
        wake: threading.Event,
        poll_timeout: float = 0.1,
        source_type: str = "source",
        status_interval: float = 0.0,
        lane_stall_after: float | None = None,
        readiness: ReadinessConfig | None = None,
    ) -> None:
        self.name = name
        self._source_type = source_type
        self._source = source
        self._sinks = dict(sinks)
        self._processor = processor
        self._skips = processor if isinstance(processor, ReportsSkips) else None
        """The processor's skip logs, reported on the periodic turn (B42)."""
        self._cfg = checkpoint
        self._clock = clock
        self._meter = meter
        self._readiness = readiness if readiness is not None else ReadinessConfig()
        self._budget = budget
        self._shutdown = shutdown
        self._wake = wake
        self._poll_timeout = poll_timeout
        self._lane_stall_after = lane_stall_after
        # Sources that implement FetchLagSource report how far behind each lane is.
        self._fetch_lag: Callable[[], Mapping[Lane, int]] | None = (
            source.fetch_lag if isinstance(source, FetchLagSource) else None
        )
        # ... and AssignmentWaitSource what they wait for while no lane is assigned.
        self._assignment_wait: Callable[[], str | None] | None = (
            source.assignment_wait if isinstance(source, AssignmentWaitSource) else None
        )
        # Effectively-once sinks name the lanes whose replayed blocks wait for rows (B121).
        self._replaying: list[Callable[[], frozenset[Lane]]] = [
            sink.replaying_lanes for sink in self._sinks.values() if isinstance(sink, ReplayingSink)
        ]
        # Per owned lane: when it last returned a batch, was assigned or was resumed (B32).
        self._fetched_at: dict[Lane, float] = {}
        self._real_time = isinstance(clock, SystemClock)
        self.tracker = PartitionTracker(clock)
        self.tracker.add_waker(wake)
        self._committer = Committer(
            tracker=self.tracker,
            source=source,
            sinks=self._sinks,
            clock=clock,
            interval=checkpoint.interval,
            meter=meter,
        )
        self._gate = PendingGate(checkpoint.max_pending_batches)
        self._hysteresis = Hysteresis(
            limit=budget.limit,
            high_ratio=backpressure.high_ratio,
            low_ratio=backpressure.low_ratio,
            min_pause=backpressure.min_pause,
            clock=clock,
        )
        self._backlog: deque[_Taken] = deque()
        self._stall: Stalled | None = None
        self._paused: set[Lane] = set()
        self._gated: set[Lane] = set()
        self._failure: str | None = None
        self._source_drained = False
        self._assigned_seen = False
        self._started = False
        self._finished = False
        self._closing = False
        self._revoke_abandoned = 0
        self.records_in = 0
        self.batches_in = 0
        self._heartbeat = clock.monotonic()
        self._started_at = clock.monotonic()
        self._gauges_due = self._started_at
        self._status = StatusLine(
            name,
            interval=status_interval,
            meter=meter,
            now=self._started_at,
            freshness_window=self._readiness.freshness_window,
            wall=clock.time,
        )
        # Metric series, created once.
        # One series per lane and event, labelled with the source connector's name; a
        # source reporting its own lag sets the same series (B23).
        src = {"component": "source", "component_type": source_type}
        self._lane_metrics: dict[Lane, _LaneMetrics] = {}
        self._poll_seconds = meter.histogram(names.SOURCE_POLL_SECONDS, **src)
        self._rebalance_assigned = meter.counter(names.SOURCE_REBALANCES, **src, event="assigned")
        self._rebalance_revoked = meter.counter(names.SOURCE_REBALANCES, **src, event="revoked")
        bp = {"component": "backpressure", "component_type": "flow"}
        self._bp_paused = meter.gauge(names.BP_PAUSED, **bp)
        self._bp_inflight = meter.gauge(names.BP_INFLIGHT_BYTES, **bp)
        self._pause_events = {
            cause: meter.counter(names.BP_PAUSE_EVENTS, **bp, cause=cause)
            for cause in ("budget", "pending", "sink_full", "not_ready")
        }

    # -- failure ----------------------------------------------------------------------

    @property
    def failure(self) -> str | None:
        return self._failure

    def fail(self, reason: str) -> None:
        """Mark the run failed (pipeline thread); the loop ends and drains."""
        if self._failure is None:
            self._failure = reason
            logger.error("pipeline %s failing: %s", self.name, reason)
        self._wake.set()

    # -- SourceEvents -----------------------------------------------------------------

    def assigned(self, lanes: Collection[Lane]) -> None:
        """The source owns ``lanes`` now: a new epoch each (pipeline thread)."""
        lanes = list(lanes)
        logger.info("pipeline %s assigned %s", self.name, ", ".join(map(str, lanes)))
        self.tracker.assign(lanes)
        self._paused.difference_update(lanes)
        self._gated.difference_update(lanes)
        now = self._clock.monotonic()
        for lane in lanes:
            self._fetched_at[lane] = now
        self._assigned_seen = True
        self._rebalance_assigned.inc()

    def revoked(self, lanes: Collection[Lane]) -> None:
        """Revoke barrier (B15): drain, commit ``lanes`` synchronously, then return.

        Called by the source on the pipeline thread, possibly from inside ``poll`` or
        ``close``. Never raises into the source: a failure here fails the run, except a
        commit the source could not make for a reason that can pass (B36), which leaves
        the lanes to the next owner at their last commit.
        """
        lanes = set(lanes)
        logger.info("pipeline %s revoking %s", self.name, ", ".join(map(str, sorted(lanes))))
        self._rebalance_revoked.inc()
        try:
            if not self._closing:
                deadline = self._clock.monotonic() + self._cfg.drain_timeout
                if not write_out(self, self._sinks, self._clock, deadline, lanes):
                    logger.warning(
                        "revocation drain of %s did not write everything in time; "
                        "the rest is left to the next owner",
                        ", ".join(map(str, sorted(lanes))),
                    )
            self._forget_in_sinks(lanes)
            final = self.tracker.revoke(lanes)
            if self._closing:
                # Revoked while the source closes, after the final synchronous commit:
                # only positions that still moved need committing.
                done = self._committer.committed
                final = {lane: pos for lane, pos in final.items() if done.get(lane) != pos}
            if final and not self._committer.commit_now(sync=True, positions=final, revoking=True):
                self.fail(f"synchronous commit on revocation of {sorted(map(str, lanes))} failed")
            self._committer.forget(lanes)
        except Exception as exc:
            logger.exception("revocation of %s failed", sorted(map(str, lanes)))
            self.fail(f"revocation failed: {exc}")
            self.tracker.revoke(lanes)
        self._release_lanes(lanes)

    def lost(self, lanes: Collection[Lane]) -> None:
        """The source lost ``lanes`` with its session (pipeline thread, B177): their
        epochs end with no drain and no commit; the next owner replays from the last
        commit. Batches of these lanes still in flight are acknowledged into an ended
        epoch, which the tracker ignores."""
        lanes = set(lanes)
        logger.warning(
            "pipeline %s lost %s; dropped without a commit",
            self.name,
            ", ".join(map(str, sorted(lanes))),
        )
        self._rebalance_revoked.inc()
        try:
            self._forget_in_sinks(lanes)
        except Exception as exc:
            logger.exception("forgetting lost %s failed", sorted(map(str, lanes)))
            self.fail(f"losing lanes failed: {exc}")
        self.tracker.revoke(lanes)
        self._committer.forget(lanes)
        self._release_lanes(lanes)

    def _forget_in_sinks(self, lanes: set[Lane]) -> None:
        for sink in self._sinks.values():
            # Effectively-once sinks forget the lanes' blocks and intents (B89).
            if isinstance(sink, RevocationAwareSink):
                sink.lanes_revoked(lanes)

    def _release_lanes(self, lanes: set[Lane]) -> None:
        """The runtime's own state of ``lanes`` after a revocation or a loss."""
        # Batches of these lanes still waiting belong to an ended epoch: drop them.
        kept: deque[_Taken] = deque()
        for taken in self._backlog:
            if taken.batch.lane in lanes:
                self._revoke_abandoned += 1
                taken.ack.release(False)  # old epoch: the tracker ignores it
            else:
                kept.append(taken)
        if len(kept) != len(self._backlog):
            self._stall = None
        self._backlog = kept
        self._paused.difference_update(lanes)
        self._gated.difference_update(lanes)
        for lane in lanes:
            self._fetched_at.pop(lane, None)
            metrics = self._lane_metrics.get(lane)
            if metrics is not None:
                metrics.lag.set(0)  # B23: not owned any more
                metrics.pending.set(0)
                metrics.age.set(0)

    def drained(self) -> None:
        """A bounded source handed out everything (pipeline thread)."""
        logger.info("pipeline %s: source drained", self.name)
        self._source_drained = True

    def undrained(self) -> None:
        """A bounded source that drained has input again (pipeline thread, B34)."""
        if self._source_drained:
            logger.info("pipeline %s: source has input again; reading it", self.name)
        self._source_drained = False

    # -- health (any thread) ----------------------------------------------------------

    def readiness(self) -> tuple[bool, str]:
        if self._finished:
            return False, "pipeline finished"
        if not self._started:
            return False, "pipeline starting"
        if not (self._assigned_seen or self.batches_in or self._source_drained):
            return False, "no lanes assigned yet"
        for sink in self._sinks.values():
            try:
                ready = sink.ready()
            except Exception as exc:
                return False, f"sink {sink.name} probe raised: {exc}"
            if not ready:
                return False, f"sink {sink.name} not ready"
        return self._fresh_enough()

    def _fresh_enough(self) -> tuple[bool, str]:
        """``readiness.max_freshness`` against the recent p99 of event time → written of
        every sink (B222). Any thread; reads the meter's recent counts only."""
        bound = self._readiness.max_freshness
        if bound is None:
            return True, "ready"
        window = self._readiness.freshness_window
        recent = self._meter.freshness.quantiles(
            names.SINK_EVENT_TO_WRITTEN.name, self._clock.time(), window, (0.99,)
        )
        for where, (p99,) in sorted(recent.items()):
            if p99 is not None and p99 > bound:
                return False, (
                    f"freshness p99 of {where} is {p99:.1f}s over the last {window:.0f}s, "
                    f"above readiness.max_freshness {bound:g}s"
                )
        return True, "ready"

    def liveness(self, stall_after: float) -> tuple[bool, str]:
        if not self._started or self._finished:
            return True, "not running"
        now = self._clock.monotonic()
        quiet = now - self._heartbeat
        if quiet > stall_after:
            return False, f"pipeline thread made no progress for {quiet:.1f}s"
        waiting = self.tracker.seconds_since_resolution()
        if waiting > stall_after:
            return False, f"no batch resolved for {waiting:.1f}s while batches are pending"
        for lane in self.tracker.snapshot():
            if lane.queued and lane.seconds_since_advance > stall_after:
                return False, (
                    f"watermark of {lane.lane} stuck for {lane.seconds_since_advance:.1f}s "
                    f"with {lane.queued} batch(es) behind it"
                )
        return self._silent_lanes(now, stall_after)

    def _silent_lanes(self, now: float, stall_after: float) -> tuple[bool, str]:
        """B32: an owned lane with records to fetch, not paused by spate, polled nothing."""
        fetch_lag = self._fetch_lag
        if fetch_lag is None:
            return True, "alive"
        limit = self._lane_stall_after if self._lane_stall_after is not None else stall_after
        fetched_at = dict(self._fetched_at)
        paused = frozenset(self._paused)
        for lane, lag in fetch_lag().items():
            since = fetched_at.get(lane)
            if lag <= 0 or since is None or lane in paused:
                continue
            if now - since > limit:
                return False, (
                    f"lane {lane} is {lag} record(s) behind and returned nothing for "
                    f"{now - since:.1f}s although spate did not pause it"
                )
        return True, "alive"

    # -- the loop ---------------------------------------------------------------------

    def beat(self) -> None:
        self._heartbeat = self._clock.monotonic()

    def start(self) -> None:
        """Start sinks (probing their endpoints, B29), then the source."""
        for sink in self._sinks.values():
            sink.start()
        self._source.start(self)
        self._started = True
        self.beat()

    def abort_start(self) -> None:
        """Close whatever started when start-up failed (nothing was consumed)."""
        self._finished = True
        self._closing = True
        for closer in [self._source.close, *(sink.close for sink in self._sinks.values())]:
            try:
                closer()
            except Exception:
                logger.debug("close after failed start-up raised", exc_info=True)

    def should_stop(self) -> bool:
        if self._failure is not None or self._shutdown.requested:
            return True
        return self._source_drained and not self._backlog

    def step(self) -> bool:
        """One loop turn; False once the run should drain and end."""
        self.beat()
        self.advance_backlog()
        self._check_stalled_lanes()
        if self.should_stop():
            return False
        self._update_pauses()
        started = self._clock.monotonic()
        try:
            batches = self._source.poll(self._poll_timeout)
        except SourceError as exc:
            if exc.error_class is ErrorClass.FATAL:
                self.fail(f"source: {exc.reason}")
                return False
            logger.warning("source poll failed, will retry: %s", exc.reason)
            batches = ()
        took = self._clock.monotonic() - started
        self._poll_seconds.observe(took)
        for batch in batches:
            self._take(batch)
        if batches:
            self.advance_backlog()
        try:
            self._committer.maybe_commit()
        except FatalError as exc:
            # A sink's tick applied a record policy that said fail to a row it held
            # (B111): the reason names the record, one line.
            self.fail(str(exc))
            return False
        now = self._clock.monotonic()
        if now >= self._gauges_due:
            self._gauges_due = now + _GAUGE_INTERVAL
            self._update_gauges()
            if self._skips is not None:
                self._skips.report_skips_due()
        if not batches and not self.should_stop() and took < self._poll_timeout / 2:
            self._idle(self._poll_timeout - took)
        return not self.should_stop()

    def _idle(self, seconds: float) -> None:
        """Wait for an ack resolution, a signal or ``seconds`` (manual clocks advance)."""
        if self._real_time:
            self._wake.wait(seconds)
            self._wake.clear()
        else:
            self._clock.sleep(seconds)

    def _take(self, batch: PayloadBatch) -> None:
        count = len(batch)
        if not count:
            return
        ack = self.tracker.register(batch)
        self._fetched_at[batch.lane] = self._clock.monotonic()
        self.records_in += count
        self.batches_in += 1
        metrics = self._metrics_for(batch.lane)
        metrics.records.inc(count)
        metrics.bytes.inc(batch.payload_bytes())
        self._backlog.append(_Taken(batch, ack))

    def _metrics_for(self, lane: Lane) -> _LaneMetrics:
        metrics = self._lane_metrics.get(lane)
        if metrics is None:
            label = str(lane)
            src = {"component": "source", "component_type": self._source_type, "lane": label}
            ckpt = {"component": "checkpoint", "component_type": "checkpoint", "lane": label}
            metrics = _LaneMetrics(
                records=self._meter.counter(names.SOURCE_RECORDS, **src),
                bytes=self._meter.counter(names.SOURCE_BYTES, **src),
                lag=self._meter.gauge(names.SOURCE_LAG, **src),
                pending=self._meter.gauge(names.CKPT_PENDING, **ckpt),
                age=self._meter.gauge(names.CKPT_WATERMARK_AGE, **ckpt),
            )
            self._lane_metrics[lane] = metrics
        return metrics

    def advance_backlog(self) -> bool:
        """Run the processor over taken batches in order; stop at the first stall (B8).

        Returns True when batches remain to be processed (never once the run failed:
        the rest is abandoned by :meth:`finish`). A processor error fails the batch's ack and
        the run. Called from the pipeline thread (loop turn and drain).
        """
        backlog = self._backlog
        while backlog:
            if self._failure is not None:
                return False  # a failed run processes nothing more; finish() abandons it
            taken = backlog[0]
            try:
                result = self._processor.process(taken.batch, taken.ack, taken.cursor)
            except FatalError as exc:
                # An error policy said fail: the reason names the record; a traceback
                # only helps when the user's own code raised.
                backlog.popleft()
                taken.ack.release(False)
                cause = exc.__cause__
                if isinstance(cause, Exception) and not isinstance(cause, SpateError):
                    logger.error("user code raised on %s", taken.batch.lane, exc_info=cause)
                else:
                    logger.debug("processing a batch of %s failed", taken.batch.lane, exc_info=True)
                self.fail(str(exc))
                return bool(backlog)
            except Exception as exc:
                backlog.popleft()
                taken.ack.release(False)
                if isinstance(exc, FatalError):
                    # A record policy said fail; its reason names the record: one line.
                    self.fail(str(exc))
                else:
                    logger.exception("processing a batch of %s failed", taken.batch.lane)
                    self.fail(f"processing {taken.batch.lane} failed: {exc}")
                return bool(backlog)
            if result is None:
                backlog.popleft()
                taken.ack.release(True)
                continue
            taken.cursor = result.cursor
            if self._stall is None:
                self._pause_events[result.reason].inc()
                logger.debug("batch of %s stalled (%s)", taken.batch.lane, result.reason)
            self._stall = result
            return True
        self._stall = None
        return False

    def _check_stalled_lanes(self) -> None:
        fault = self.tracker.fault
        if fault is not None:  # a sink released an ack twice: nothing it says can be trusted
            self.fail(fault)
            return
        limit = self._cfg.stalled_fail_after
        for lane, seconds in self.tracker.stalled_lanes().items():
            if seconds >= limit:
                self.fail(
                    f"lane {lane}: a failed batch has blocked the head for {seconds:.1f}s "
                    f"(stalled_fail_after {limit}s)"
                )
                return

    def _update_pauses(self) -> None:
        pending = self.tracker.pending_by_lane()
        was_paused = self._hysteresis.paused
        over_budget = self._hysteresis.update(self._budget.used)
        if over_budget and not was_paused:
            self._pause_events["budget"].inc()
            logger.info(
                "pipeline %s pausing the source: %d in-flight bytes of a %d budget",
                self.name,
                self._budget.used,
                self._budget.limit,
            )
        elif was_paused and not over_budget:
            logger.info("pipeline %s resuming the source: in-flight bytes low", self.name)
        # Paused for backpressure: over the byte budget, or a sink refused a row (B7).
        sink_full = self._stall is not None and self._stall.reason == "sink_full"
        self._bp_paused.set(1 if over_budget or sink_full else 0)
        gated = self._gate.closed(pending)
        for lane in gated - self._gated:
            self._pause_events["pending"].inc()
            logger.debug("lane %s at max_pending_batches; pausing it", lane)
        self._gated = gated
        desired = set(pending) if over_budget or self._stall is not None else gated
        if desired and self._stall is None:
            # A replayed block is sealed by its own rows only: its lane keeps fetching past
            # the budget and max_pending_batches until the block completes (B121).
            for replaying in self._replaying:
                desired = desired - replaying()
        to_pause = desired - self._paused
        to_resume = self._paused - desired
        if to_pause:
            self._source.pause(to_pause)
            self._paused |= to_pause
        if to_resume:
            self._source.resume(to_resume)
            self._paused -= to_resume
            now = self._clock.monotonic()
            for lane in to_resume:
                if lane in self._fetched_at:
                    self._fetched_at[lane] = now

    def _update_gauges(self) -> None:
        self._bp_inflight.set(self._budget.used)
        snapshot = self.tracker.snapshot()
        for snap in snapshot:
            metrics = self._metrics_for(snap.lane)
            metrics.pending.set(snap.pending)
            metrics.age.set(snap.seconds_since_advance)
        if self._status.enabled:
            self._status.maybe_report(
                self._clock.monotonic(),
                records_in=self.records_in,
                records_out=self.tracker.record_counts()[0],
                paused=len(self._paused),
                lanes=len(snapshot),
                waiting=self._assignment_wait,
            )

    @property
    def paused(self) -> frozenset[Lane]:
        """Lanes the runtime has paused at the source."""
        return frozenset(self._paused)

    # -- end of run -------------------------------------------------------------------

    def finish(self, reason: str) -> ExitReport:
        """The final drain (B14): write out, commit synchronously, abandon the rest."""
        if self._failure is not None:
            reason = self._failure
            logger.info("pipeline %s draining after the failure", self.name)
        else:
            logger.info("pipeline %s draining: %s", self.name, reason)
        deadline = self._clock.monotonic() + self._cfg.drain_timeout
        written = write_out(self, self._sinks, self._clock, deadline)
        commit_ok = self._committer.commit_now(sync=True)
        abandoned_rows = 0
        for sink in self._sinks.values():
            try:
                abandoned_rows += sink.abandon()
            except Exception:
                logger.exception("sink %s failed to abandon its buffers", sink.name)
        leftover = len(self._backlog)
        while self._backlog:
            self._backlog.popleft().ack.release(False)
        # A write may have completed between the commit and the abandon.
        marks = self.tracker.watermarks()
        if marks != {k: v for k, v in self._committer.committed.items() if k in marks}:
            commit_ok = self._committer.commit_now(sync=True) and commit_ok
        snapshot = self.tracker.snapshot()
        unfinished = sum(s.queued for s in snapshot)
        delivered, failed = self.tracker.record_counts()
        dropped: dict[str, int] = {}
        for family in names.DROPPED_FAMILIES:
            if family is not names.SOURCE_DROPPED:
                for why, count in self._meter.totals(family, "reason").items():
                    dropped[why] = dropped.get(why, 0) + int(count)
        source_dropped = {
            why: int(count)
            for why, count in self._meter.totals(names.SOURCE_DROPPED, "reason").items()
        }
        late_rows = {
            table: int(count)
            for table, count in self._meter.totals(names.SINK_LATE_ROWS, "table").items()
        }
        self._closing = True
        try:
            self._source.close()
        except Exception:
            logger.exception("closing the source failed")
        for sink in self._sinks.values():
            try:
                sink.close()
            except Exception:
                logger.exception("closing sink %s failed", sink.name)
        self._finished = True
        if self.tracker.fault is not None:
            self.fail(self.tracker.fault)
            reason = self.tracker.fault
        completed = (
            self._failure is None
            and written
            and commit_ok
            and unfinished == 0
            and abandoned_rows == 0
            and leftover == 0
        )
        if not completed and self._failure is None:
            reason = (
                f"{reason}; drain left {unfinished} batch(es) unfinished, "
                f"{abandoned_rows} row(s) abandoned"
                + ("" if commit_ok else ", final commit failed")
            )
        report = ExitReport(
            pipeline=self.name,
            state="completed" if completed else "failed",
            reason=reason,
            records_in=self.records_in,
            records_delivered=delivered,
            records_failed=failed,
            batches_in=self.batches_in,
            dropped=dropped,
            source_dropped=source_dropped,
            abandoned_batches=unfinished,
            revoked_batches_dropped=self._revoke_abandoned,
            abandoned_rows=abandoned_rows,
            late_rows=late_rows,
            final_watermarks=marks,
            committed=self._committer.committed,
            duration_seconds=self._clock.monotonic() - self._started_at,
        )
        # A failure's reason was logged when it happened (fail()): not repeated here.
        log = logger.info if completed else logger.error
        log("%s", report.summary(with_reason=self._failure is None))
        return report
