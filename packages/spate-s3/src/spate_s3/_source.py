"""The coordinated S3 backfill source: splits as lanes, progress through coordination.

Owns :class:`S3Source`, the :class:`~spate.source.Source` the runtime drives. It runs one
asyncio loop in a background thread (aioboto3 downloads and the coordinator's store
calls, see docs/concepts/architecture.md); the pipeline thread calls ``poll``, ``commit``,
``pause`` and ``resume`` and waits on the loop only with timeouts.

Lifecycle:

1. ``start`` probes the location (one short listing; a missing bucket, denied access or
   an unreachable endpoint fails here naming the endpoint, B29), joins the coordination
   job, and starts a planner: the leader lists the prefix and publishes the split plan
   (B25: an unchanged prefix gives the same plan, so publishing again is a no-op).
2. The coordinator assigns splits to live instances. Each owned split is a lane
   ``Lane(split_id, 0)`` whose offsets are record ordinals within the split; ``ASSIGNED``
   reads the split's committed progress and resumes exactly after it.
3. ``commit`` maps a lane offset back to the :class:`~spate_s3._reader.Position` of that
   batch boundary (object ordinal, record index, byte offset) and writes it with the
   split's epoch: a fenced write from a zombie is refused (B24). Once every record of a
   split is committed, the split is marked completed and its lane revoked.
4. ``REVOKE_REQUESTED`` drains the lane through the runtime's revoke barrier (commit
   included), then releases the split; ``FORCED`` drops it at once (its uncommitted
   records are replayed by the next owner: at-least-once).
5. When every split of the job is completed the source reports ``drained`` and the
   pipeline ends with exit 0 — unless a split is quarantined, which fails the run (exit
   1) with a line naming each quarantined split and its reason.

Failures (B37): an object that changed under its split (ETag no longer matches), data
that cannot be decoded, or an error no retry can fix (access denied) quarantines the
split at once (B25: never mix versions). Transient read errors restart the split from
the last handed-out record after ``retry_backoff`` (doubling); the count is of
*consecutive* failures and starts again as soon as a record is read, so errors spread
over a long split never add up. ``split_attempts`` consecutive failures without a
record in between fail the run, naming the split (its committed progress stays: a rerun
resumes there). A quarantined split is its own state in the coordination store, not
completed: it keeps its committed progress and is not handed out again, the rest of
the job still finishes, every instance then reports it, and a later run started with
``coordination.retry_quarantined: true`` reads it again from that progress.

Every start and stop of work on a split is logged at INFO with ``extra`` fields
``s3_split``, ``s3_epoch`` and ``s3_event`` (``start``/``stop``), so operators and tests
can see which instance worked which split when.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Collection, Coroutine, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TypeVar

from spate import Clock, SystemClock
from spate.errors import ErrorClass, SourceError
from spate.metrics import Meter
from spate.records import Lane, PayloadBatch
from spate.source import SourceEvents
from spate_coordination import (
    CoordinationConfig,
    CoordinationError,
    CoordinationStore,
    Coordinator,
    PlanConflictError,
    ProgressWrite,
    SplitEvent,
    SplitEventKind,
    SplitStatus,
)

from spate_s3._objects import ObjectInfo, ObjectStore, open_object_store
from spate_s3._plan import SplitObjects, plan_splits, to_specs
from spate_s3._reader import Position, SplitReader, SplitReadError
from spate_s3.config import S3SourceConfig

logger = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(slots=True)
class _Split:
    """An owned split: its reader, epoch, and batch-boundary positions not yet committed."""

    objects: SplitObjects
    epoch: int
    reader: SplitReader
    committed: Position
    marks: dict[int, Position] = field(default_factory=dict)
    failures: int = 0
    """Consecutive read failures with no record read in between (B37)."""
    retry_at: float | None = None
    last_error: str = ""
    stopped: bool = False

    @property
    def lane(self) -> Lane:
        return Lane(self.objects.split_id, 0)

    @property
    def split_id(self) -> str:
        return self.objects.split_id

    def done(self) -> bool:
        """Every record read and committed."""
        return self.reader.exhausted and self.committed.offset >= self.reader.position.offset


def _loop_main(loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
    asyncio.set_event_loop(loop)
    loop.call_soon(ready.set)
    try:
        loop.run_forever()
    finally:
        loop.close()


class S3Source:
    """Implements ``Source`` for ``source: {s3: ...}`` (B24, B25)."""

    def __init__(
        self,
        config: S3SourceConfig,
        coordination: CoordinationConfig,
        store: CoordinationStore,
        *,
        meter: Meter | None = None,
        clock: Clock | None = None,
        objects: ObjectStore | None = None,
    ) -> None:
        self.config = config
        self.coordination_config = coordination
        self._coord_store = store
        self._meter = meter
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._objects = objects if objects is not None else open_object_store(config)
        self._location = config.location
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.coordinator: Coordinator | None = None
        self._events: SourceEvents | None = None
        self._splits: dict[str, _Split] = {}
        self._paused: set[Lane] = set()
        self._wake = threading.Event()
        self._planner: Future[None] | None = None
        self._fatal: SourceError | None = None
        self._drained = False
        self._rotation = 0
        self._next_state_check = 0.0
        self._completed_lanes: list[Lane] = []
        self._pending_events: deque[SplitEvent] = deque()

    # -- the I/O loop

    def _call(self, coro: Coroutine[object, object, T], timeout: float | None = None) -> T:
        loop = self._loop
        if loop is None:
            raise RuntimeError("the S3 source is not started")
        future = asyncio.run_coroutine_threadsafe(coro, loop)
        wait = timeout if timeout is not None else self.config.request_timeout
        try:
            return future.result(wait)
        except TimeoutError:
            future.cancel()
            raise

    def _start_loop(self) -> None:
        loop = asyncio.new_event_loop()
        ready = threading.Event()
        thread = threading.Thread(
            target=_loop_main, args=(loop, ready), name="spate-s3-io", daemon=True
        )
        thread.start()
        ready.wait()
        self._loop, self._thread = loop, thread

    def _stop_loop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is not None and thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
        self._loop = self._thread = None

    # -- Source

    def start(self, events: SourceEvents) -> None:
        """Probe the location, join the job and start planning. Blocks up to
        ``startup_timeout``; raises a FATAL ``SourceError`` naming what failed (B29)."""
        self._events = events
        self._start_loop()
        try:
            self._start()
        except BaseException:
            self._shutdown(release=False)
            raise

    def _start(self) -> None:
        cfg = self.config
        timeout = cfg.startup_timeout
        try:
            self._call(self._objects.open(), timeout)
            has_objects = self._call(self._objects.probe(), timeout)
        except TimeoutError:
            raise SourceError(
                f"{self._location}: {self._objects.endpoint} did not answer in {timeout}s",
                ErrorClass.FATAL,
            ) from None
        if not has_objects:
            raise SourceError(f"{self._location}: no objects under this prefix", ErrorClass.FATAL)
        assert self._loop is not None
        coordinator = Coordinator(
            self.coordination_config,
            self._coord_store,
            clock=self._clock,
            meter=self._meter,
            loop=self._loop,
            timeout=cfg.request_timeout,
        )
        try:
            coordinator.start()
        except (CoordinationError, OSError, TimeoutError) as exc:
            raise SourceError(
                f"coordination store {self._coord_store.endpoint}: {exc}", ErrorClass.FATAL
            ) from exc
        coordinator.add_listener(self._on_event)
        self.coordinator = coordinator
        logger.info(
            "S3 backfill of %s joined job %s as %s",
            self._location,
            self.coordination_config.job,
            coordinator.instance_id,
        )
        self._planner = asyncio.run_coroutine_threadsafe(self._plan_loop(), self._loop)

    def _on_event(self, event: SplitEvent) -> None:
        self._wake.set()

    async def _plan_loop(self) -> None:
        """Publish the plan (leader only); retry store errors; record fatal ones."""
        coordinator = self.coordinator
        assert coordinator is not None
        core = coordinator.core
        interval = self.coordination_config.poll_interval
        while True:
            try:
                published = await core.read_plan() is not None
                if published and not self.config.refresh_listing:
                    return
                if core.is_leader():
                    await self._publish(published)
                    return
                if published:
                    return  # the leader checks the listing when refresh_listing is on
            except asyncio.CancelledError:
                raise
            except PlanConflictError as exc:
                self._set_fatal(
                    f"{self._location}: the prefix changed since job "
                    f"{self.coordination_config.job!r} was planned ({exc})"
                )
                return
            except SourceError as exc:
                if exc.error_class is ErrorClass.FATAL:
                    self._set_fatal(exc.reason)
                    return
                logger.warning("listing %s failed, will retry: %s", self._location, exc.reason)
            except (CoordinationError, OSError, TimeoutError) as exc:
                logger.warning("publishing the plan failed, will retry: %s", exc)
            except Exception as exc:
                logger.exception("planning %s failed", self._location)
                self._set_fatal(f"planning {self._location} failed: {exc!r}")
                return
            await asyncio.sleep(interval)

    async def _publish(self, already: bool) -> None:
        started = time.monotonic()
        objects: list[ObjectInfo] = [obj async for obj in self._objects.list()]
        splits = plan_splits(self._location, objects, self.config.split_target_bytes)
        if not splits:
            raise SourceError(f"{self._location}: no objects under this prefix", ErrorClass.FATAL)
        coordinator = self.coordinator
        assert coordinator is not None
        written = await coordinator.core.publish_plan(to_specs(splits))
        logger.info(
            "%s: %d objects (%d bytes) in %d splits, listed in %.1fs; plan %s",
            self._location,
            len(objects),
            sum(o.size for o in objects),
            len(splits),
            time.monotonic() - started,
            "published" if written else "unchanged (already published)",
        )

    def _set_fatal(self, reason: str) -> None:
        if self._fatal is None:
            logger.error("S3 source failing: %s", reason)
            self._fatal = SourceError(reason, ErrorClass.FATAL)
        self._wake.set()

    def poll(self, timeout: float) -> Sequence[PayloadBatch]:
        """Batches that are ready, at most one per owned, unpaused split (pipeline thread)."""
        if self._fatal is not None:
            raise self._fatal
        batches = self._poll_once()
        if not batches and not self._drained:
            self._wake.wait(timeout)
            self._wake.clear()
            if self._fatal is not None:
                raise self._fatal
            batches = self._poll_once()
        return batches

    def _poll_once(self) -> list[PayloadBatch]:
        coordinator = self.coordinator
        if coordinator is None or self._events is None:
            raise RuntimeError("poll before start")
        self._pending_events.extend(coordinator.take_events())
        while self._pending_events:
            try:
                self._handle(self._pending_events[0])
            except (CoordinationError, TimeoutError) as exc:
                # Keep the event: it is handled again on the next poll.
                logger.warning("coordination store unavailable, will retry: %s", exc)
                break
            self._pending_events.popleft()
        self._finish_completed()
        self._restart_due()
        batches: list[PayloadBatch] = []
        limit = self.config.batch_records
        splits = list(self._splits.values())
        # Rotate the start so one busy split cannot always go first.
        self._rotation = (self._rotation + 1) % max(1, len(splits))
        for split in splits[self._rotation :] + splits[: self._rotation]:
            if split.lane in self._paused or split.retry_at is not None:
                continue
            try:
                got = split.reader.take(limit)
            except SplitReadError as exc:
                self._failed(split, exc)
                continue
            if got is not None:
                batch, position = got
                split.failures = 0  # progress: the retry budget is whole again (B37)
                split.marks[batch.next_offset] = position
                batches.append(batch)
        if not batches:
            self._finish_completed()
            self._maybe_drained()
        return batches

    # -- coordination events (pipeline thread)

    def _handle(self, event: SplitEvent) -> None:
        kind = event.kind
        if kind is SplitEventKind.ASSIGNED:
            self._assigned(event.split_id, event.epoch)
        elif kind is SplitEventKind.REVOKE_REQUESTED:
            self._revoke(event.split_id, event.epoch)
        elif kind is SplitEventKind.FORCED:
            self._forced(event.split_id, event.epoch, event.reason)
        # JOB_COMPLETE is read from coordinator.job_complete in _maybe_drained.

    def _assigned(self, split_id: str, epoch: int) -> None:
        coordinator = self.coordinator
        assert coordinator is not None and self._events is not None
        owned = coordinator.owned().get(split_id)
        if owned is None or owned.epoch != epoch:
            return  # lost again before we saw it
        try:
            objects = SplitObjects.from_spec(owned.spec)
            position = Position.from_progress(coordinator.read_progress(split_id))
        except ValueError as exc:
            self._set_fatal(f"split {split_id}: {exc}")
            return
        reader = self._new_reader(objects, position)
        split = _Split(objects, epoch, reader, committed=position)
        self._splits[split_id] = split
        logger.info(
            "split %s (epoch %d): working from object %d record %d (%d objects)",
            split_id,
            epoch,
            position.object_index,
            position.record,
            len(objects.objects),
            extra={"s3_split": split_id, "s3_epoch": epoch, "s3_event": "start"},
        )
        self._events.assigned([split.lane])

    def _new_reader(self, objects: SplitObjects, position: Position) -> SplitReader:
        assert self._loop is not None
        reader = SplitReader(
            objects,
            position,
            store=self._objects,
            config=self.config,
            loop=self._loop,
            wake=self._wake,
        )
        reader.start_download()
        return reader

    def _stopped(self, split: _Split, reason: str) -> None:
        split.reader.stop()
        if split.stopped:
            return
        split.stopped = True
        logger.info(
            "split %s (epoch %d): stopped (%s)",
            split.split_id,
            split.epoch,
            reason,
            extra={"s3_split": split.split_id, "s3_epoch": split.epoch, "s3_event": "stop"},
        )

    def _revoke(self, split_id: str, epoch: int) -> None:
        split = self._splits.get(split_id)
        if split is None or split.epoch != epoch:
            return
        assert self._events is not None and self.coordinator is not None
        self._stopped(split, "revoked: handing over")
        # The barrier drains the lane and commits it through commit() (B15).
        self._events.revoked([split.lane])
        self._splits.pop(split_id, None)
        self._paused.discard(split.lane)
        try:
            self.coordinator.release(split_id, epoch)
        except CoordinationError as exc:
            logger.warning("releasing split %s failed (it moves by force later): %s", split_id, exc)

    def _forced(self, split_id: str, epoch: int, reason: str) -> None:
        split = self._splits.get(split_id)
        if split is None or split.epoch != epoch:
            return
        assert self._events is not None
        self._splits.pop(split_id, None)
        self._stopped(split, f"lost: {reason}")
        self._events.revoked([split.lane])
        self._paused.discard(split.lane)

    # -- completion, failure, retry

    def _finish_completed(self) -> None:
        if self._completed_lanes:
            lanes, self._completed_lanes = self._completed_lanes, []
            assert self._events is not None
            self._events.revoked(lanes)
            self._paused.difference_update(lanes)
        for split in [s for s in self._splits.values() if s.done()]:
            if not self._write_state(split):
                continue
            self._splits.pop(split.split_id, None)
            self._stopped(split, "completed")
            assert self._events is not None
            self._events.revoked([split.lane])
            self._paused.discard(split.lane)

    def _write_state(self, split: _Split, *, quarantine: str | None = None) -> bool:
        """Mark a split completed, or quarantined with a reason; False to retry later."""
        coordinator = self.coordinator
        assert coordinator is not None
        try:
            if quarantine is not None:
                result = coordinator.quarantine(split.split_id, split.epoch, quarantine)
            else:
                result = coordinator.mark_completed(split.split_id, split.epoch)
            if result is ProgressWrite.FENCED:
                logger.info("split %s: state write fenced (a successor owns it)", split.split_id)
        except (CoordinationError, TimeoutError) as exc:
            logger.warning(
                "recording the state of split %s failed, will retry: %s", split.split_id, exc
            )
            return False
        return True

    def _failed(self, split: _Split, exc: SplitReadError) -> None:
        """A read error surfaced after the records before it were handed out (B37).

        Permanent errors quarantine the split. Transient ones restart it from the last
        handed-out record; only ``split_attempts`` failures in a row, with no record read
        in between, fail the run (the committed progress stays for a rerun).
        """
        split.failures += 1
        split.last_error = exc.reason
        if exc.permanent:
            self._quarantine(split, exc.reason)
            return
        attempts = self.config.split_attempts
        if split.failures >= attempts:
            self._stopped(split, "failing")
            self._set_fatal(
                f"split {split.split_id}: {split.failures} read failure(s) in a row "
                f"(split_attempts is {attempts}); the last: {exc.reason}"
            )
            return
        delay = self.config.retry_backoff * (2 ** (split.failures - 1))
        logger.warning(
            "split %s: read failed (%d in a row, %d allowed), retrying in %.1fs: %s",
            split.split_id,
            split.failures,
            attempts,
            delay,
            exc.reason,
        )
        split.reader.stop()
        split.retry_at = self._clock.monotonic() + delay

    def _restart_due(self) -> None:
        now = self._clock.monotonic()
        for split in self._splits.values():
            if split.retry_at is not None and now >= split.retry_at:
                split.retry_at = None
                split.reader = self._new_reader(split.objects, split.reader.position)

    def _quarantine(self, split: _Split, reason: str) -> None:
        assert self._events is not None
        logger.error("split %s: quarantined: %s", split.split_id, reason)
        self._stopped(split, "quarantined")
        # Commit what was delivered before the failure, then record the quarantine.
        self._events.revoked([split.lane])
        self._splits.pop(split.split_id, None)
        self._paused.discard(split.lane)
        for _ in range(3):
            if self._write_state(split, quarantine=reason):
                return
            time.sleep(self.config.retry_backoff)
        self._set_fatal(f"split {split.split_id} quarantined ({reason}); recording it failed")

    def _maybe_drained(self) -> None:
        """Report ``drained`` once nothing is left for this instance to hand out.

        That is when the job is complete, or when every split this instance owns is
        fully handed out and every other planned split is completed: the final commit
        of the drain then completes ours. An instance never drains while another split
        could still move to it (a dead instance's, say), so the job always finishes.
        """
        coordinator = self.coordinator
        if self._drained or coordinator is None:
            return
        if self._planner is not None and not self._planner.done():
            return  # no plan yet, or the listing is being checked (refresh_listing)
        if any(not s.reader.exhausted or s.retry_at is not None for s in self._splits.values()):
            return
        if not coordinator.job_complete:
            now = self._clock.monotonic()
            if now < self._next_state_check:
                return
            self._next_state_check = now + self.coordination_config.poll_interval
            if not self._others_settled():
                return
        try:
            quarantined = self._quarantined()
        except (CoordinationError, TimeoutError) as exc:
            logger.warning("reading split states failed, will retry: %s", exc)
            return
        if quarantined:
            self._set_fatal(
                f"{self._location}: job {self.coordination_config.job!r} finished with "
                f"{len(quarantined)} quarantined split(s): " + "; ".join(quarantined)
            )
            raise self._fatal  # type: ignore[misc]
        self._drained = True
        logger.info(
            "job %s: nothing left to read here (%d split(s) to complete on the final commit)",
            self.coordination_config.job,
            len(self._splits),
        )
        assert self._events is not None
        self._events.drained()

    def _others_settled(self) -> bool:
        """Whether every planned split not owned here is completed or quarantined.

        Then no split can come this way any more (a quarantined one only in a later
        run), so an instance that owns nothing may stop too.
        """
        coordinator = self.coordinator
        assert coordinator is not None
        try:
            if coordinator.read_plan() is None:
                return False
            states = coordinator.split_states()
        except (CoordinationError, TimeoutError) as exc:
            logger.debug("reading split states failed: %s", exc)
            return False
        return bool(states) and all(
            state.settled for split_id, state in states.items() if split_id not in self._splits
        )

    def _quarantined(self) -> list[str]:
        coordinator = self.coordinator
        assert coordinator is not None
        return [
            f"{split_id}: {state.reason}"
            for split_id, state in coordinator.split_states().items()
            if state.status is SplitStatus.QUARANTINED
        ]

    # -- commit, pause, resume, close

    def commit(self, offsets: Mapping[Lane, int], *, sync: bool) -> None:
        """Write each moved split's position, fenced by its epoch (B24, B25).

        Positions exist only at batch boundaries, which is all the runtime commits.
        Raises ``SourceError`` when the store could not be reached (the runtime retries).
        """
        coordinator = self.coordinator
        if coordinator is None:
            return
        errors: list[str] = []
        for lane, offset in offsets.items():
            split = self._splits.get(lane.stream)
            if split is None or offset <= split.committed.offset:
                continue
            position = split.marks.get(offset)
            if position is None:
                logger.warning("split %s: no batch ends at offset %d; not committed", lane, offset)
                continue
            try:
                result = coordinator.commit_progress(
                    split.split_id,
                    split.epoch,
                    position.to_progress(),
                )
            except (CoordinationError, TimeoutError) as exc:
                errors.append(f"{lane}: {exc}")
                continue
            if result is ProgressWrite.FENCED:
                logger.info("split %s: progress write fenced (a successor owns it)", lane)
                continue
            split.committed = position
            for mark in [m for m in split.marks if m <= offset]:
                del split.marks[mark]
            if split.done() and self._write_state(split):
                # Every record is delivered: complete now (the final commit of a drain
                # has no poll after it); the lane is revoked on the next poll.
                self._splits.pop(split.split_id, None)
                if not split.stopped:  # not inside this lane's own revocation
                    self._stopped(split, "completed")
                    self._completed_lanes.append(split.lane)
        if errors:
            raise SourceError(f"committing S3 progress failed: {'; '.join(errors)}")

    def pause(self, lanes: Collection[Lane]) -> None:
        self._paused.update(lanes)

    def resume(self, lanes: Collection[Lane]) -> None:
        self._paused.difference_update(lanes)
        self._wake.set()

    def close(self) -> None:
        """Stop readers, leave the job (releasing owned splits) and stop the loop."""
        self._shutdown(release=True)

    def _shutdown(self, *, release: bool) -> None:
        for split in list(self._splits.values()):
            if release and split.done() and self._write_state(split):
                # The final commit delivered everything but could not complete it.
                self._stopped(split, "completed")
            self._stopped(split, "closing")
        self._splits.clear()
        if self._planner is not None:
            self._planner.cancel()
            self._planner = None
        if self.coordinator is not None:
            try:
                self.coordinator.stop(release=release)
            except Exception:
                logger.warning("leaving the coordination job failed", exc_info=True)
            self.coordinator = None
        if self._loop is not None:
            with contextlib.suppress(Exception):
                self._call(self._objects.close(), 10)
        self._stop_loop()
