"""The source contract: what the runtime needs from Kafka, S3 and every other source.

The runtime drives a source from the pipeline thread only:

1. ``start(events)`` connects (failing with the endpoint named, B29) and subscribes.
2. ``poll(timeout)`` returns zero or more :class:`~spate.records.PayloadBatch` objects,
   at most one per lane per call. A source may call ``events.assigned`` and
   ``events.revoked`` from *inside* ``poll`` (librdkafka does); ``revoked`` returns only
   after the runtime drained those lanes and committed them synchronously (B15). A
   bounded source calls ``events.drained()`` once it has handed out everything, then
   keeps returning no batches — unless a rebalance may hand it lanes it has not read to
   their end: it then calls ``events.undrained()`` first, reads them, and calls
   ``events.drained()`` again (B34).
3. ``commit(offsets, sync=...)`` receives, per lane, the next offset to consume. The
   runtime only ever passes positions behind delivered data (B1); a source must never
   commit anything else. ``sync=False`` may only store them for the source's own commit
   cadence (Kafka ``commit_interval``); ``sync=True`` commits before returning.
4. ``pause(lanes)`` / ``resume(lanes)`` stop and restart fetching while ``poll`` keeps
   being called (B7).
5. ``close()`` releases everything; the runtime has already committed what it could.

A source that can tell, per lane it fetches, how many records are waiting that ``poll``
has not returned yet also implements :class:`FetchLagSource`; ``/healthz`` then notices a
lane that is owned, behind and silent although spate did not pause it (B32).

A source whose ``commit(..., sync=False)`` only stores positions to send later (Kafka)
implements :class:`DurableCommitSource`: what is durably committed is then what its store
acknowledged, not what was handed over, and effectively-once sinks forget the block intents
below that alone (B89).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import NamedTuple, Protocol, runtime_checkable

from spate.records import Lane, PayloadBatch


class SourceEvents(Protocol):
    """Callbacks the runtime gives a source; called on the pipeline thread."""

    def assigned(self, lanes: Collection[Lane]) -> None:
        """The source now owns ``lanes`` (a new ownership epoch for each)."""
        ...

    def revoked(self, lanes: Collection[Lane]) -> None:
        """The source is losing ``lanes``. Blocks until they are drained and committed.

        This is the revoke barrier: when it returns, every delivered batch of those lanes
        is committed through ``Source.commit(..., sync=True)`` and the rest abandoned.
        """
        ...

    def lost(self, lanes: Collection[Lane]) -> None:
        """The source lost ``lanes`` without a revocation (its group session expired,
        it was fenced): another owner may read them already, so nothing of them is
        drained or committed; what was taken and not committed is abandoned (B177)."""
        ...

    def drained(self) -> None:
        """A bounded source has handed out all of its input."""
        ...

    def undrained(self) -> None:
        """A bounded source that called ``drained()`` has input again (B34).

        A rebalance may hand a drained Kafka member a partition a peer did not finish;
        the run goes on until the source calls ``drained()`` again.
        """
        ...


class Source(Protocol):
    """A stream of payload batches with commit, pause and resume."""

    def start(self, events: SourceEvents) -> None:
        """Connect and subscribe; raise ``SourceError`` naming the endpoint on failure."""
        ...

    def poll(self, timeout: float) -> Sequence[PayloadBatch]:
        """Return available batches (possibly none) within ``timeout`` seconds."""
        ...

    def commit(self, offsets: Mapping[Lane, int], *, sync: bool) -> None:
        """Record that everything before ``offsets[lane]`` is delivered, per lane."""
        ...

    def pause(self, lanes: Collection[Lane]) -> None:
        """Stop fetching from ``lanes``; ``poll`` keeps being called."""
        ...

    def resume(self, lanes: Collection[Lane]) -> None:
        """Fetch from ``lanes`` again."""
        ...

    def close(self) -> None:
        """Release connections. Called once, after the final commit."""
        ...


@runtime_checkable
class BoundedSource(Protocol):
    """A source with a known end may also say how much is left (optional).

    ``remaining()`` is the number of records still to hand out before the end (a
    bounded Kafka run's end offsets, a memory source's data), or None while it is not
    known. It is called from another thread (the CLI's progress display), so it only
    reads state; it never blocks on the network for long.
    """

    def remaining(self) -> int | None:
        """Records left before the end, or None when unknown."""
        ...


class Progress(NamedTuple):
    """How far a bounded source is: ``done`` of ``total`` in ``unit``.

    ``unit`` is ``"records"``, ``"bytes"`` or ``"splits"`` — whatever the source can
    count against its end (a backfill knows its planned bytes, not its records).
    """

    done: int
    total: int
    unit: str


@runtime_checkable
class ProgressSource(Protocol):
    """A source that reports its progress in its own unit (optional; see :class:`Progress`).

    ``progress()`` is None while the end is not known. It is called from another thread
    (the CLI's progress display), so it only reads state and never blocks on the
    network. A source implementing it is shown by it rather than by
    :class:`BoundedSource`.
    """

    def progress(self) -> Progress | None:
        """Done and total in the source's unit, or None when unknown."""
        ...


@runtime_checkable
class FetchLagSource(Protocol):
    """Optional part of a source: how far behind each lane it fetches is (B32)."""

    def fetch_lag(self) -> Mapping[Lane, int]:
        """Records waiting to be fetched per owned lane the source is not pausing.

        Lanes the source paused (for the runtime or because a bounded lane is done) are
        left out. Measured values, possibly a few seconds old; may be called from any
        thread and never blocks on the pipeline thread.
        """
        ...


@runtime_checkable
class AssignmentWaitSource(Protocol):
    """Optional part of a source: what it waits for while it owns no lane (B43)."""

    def assignment_wait(self) -> str | None:
        """One phrase naming what the source waits for before lanes are assigned, and for
        how long at most (a Kafka consumer joining its group; a member that died without
        leaving holds its partitions until its session times out), or None when it waits
        for nothing in particular. Pipeline thread; never blocks."""
        ...


@runtime_checkable
class DurableCommitSource(Protocol):
    """Optional part of a source: which commits its store has acknowledged (B89).

    A source without it commits durably inside ``commit`` (``sync`` or not); one with it
    may only store an asynchronous commit and send it later, where it can be refused.
    """

    def durable_commits(self) -> Mapping[Lane, int]:
        """Per owned lane, the newest position the store confirmed as committed.

        Lanes with no confirmed commit in this ownership are left out. Pipeline thread.
        """
        ...
