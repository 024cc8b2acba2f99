"""The one commit gate of windowed sinks, and the registry its locks live in (B157, B231).

What makes a written window visible — a Parquet manifest, a Hugging Face Hub commit, a
third-party sink's publish — runs through a :class:`CommitGate`, which serializes the
commits of one destination. The locks are held by a :class:`CommitGates` registry, an
ordinary object: every gate built from the same registry for the same destination shares
one lock, gates of different registries share nothing. There is no process-wide table
behind it (ADR 0023): the assembly builds one registry per pipeline and hands it to every
factory in :attr:`BuildContext.commit_gates <spate.plugins.BuildContext.commit_gates>`;
an embedder running several pipelines in one process that write one destination passes
them the same registry (``build_parts(..., commit_gates=...)``).

Does not own: the write-behind engine that calls the gate
(:mod:`spate.sink.writebehind`), or a gate across processes (``spate_parquet.StoreGate``
subclasses :class:`CommitGate`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Literal, TypeVar

from spate.errors import ErrorClass, SinkError

__all__ = ["CommitGate", "CommitGates"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


class CommitGates:
    """The locks of the commit gates built from it: one per destination (B231).

    One registry per pipeline, made by the assembly (:attr:`BuildContext.commit_gates
    <spate.plugins.BuildContext.commit_gates>`); share one between pipelines to serialize
    their writers of a destination too. Thread-safe: gates are built on the pipeline
    thread and used on writer threads.
    """

    __slots__ = ("_guard", "_locks")

    def __init__(self) -> None:
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def lock(self, destination: str) -> threading.Lock:
        """The lock of ``destination``, made the first time it is asked for."""
        with self._guard:
            found = self._locks.get(destination)
            if found is None:
                found = self._locks[destination] = threading.Lock()
            return found

    def gate(
        self,
        destination: str,
        timeout: float,
        *,
        when_held: Literal["proceed", "retry"] = "proceed",
    ) -> CommitGate:
        """A :class:`CommitGate` of ``destination`` over this registry's lock for it."""
        return CommitGate(destination, timeout, gates=self, when_held=when_held)

    def __len__(self) -> int:
        """How many destinations have a lock."""
        with self._guard:
            return len(self._locks)


class CommitGate:
    """Serializes the commits of one destination (B157).

    Every gate built from the same :class:`CommitGates` for the same ``destination``
    shares one lock, so writers of one manifest, or of one repository and branch, commit
    one at a time. A writer that waits longer than ``timeout`` either commits without the
    gate (``when_held="proceed"``: the commit is correct without it, a compare-and-set for
    instance, and a stalled holder must not stop publishing) or fails the attempt with a
    RETRYABLE ``SinkError`` (``when_held="retry"``: the engine tries again after its
    backoff).

    Subclasses may add a gate across processes (``spate_parquet.StoreGate``) by
    overriding :meth:`run` and :meth:`close`.
    """

    def __init__(
        self,
        destination: str,
        timeout: float,
        *,
        gates: CommitGates,
        when_held: Literal["proceed", "retry"] = "proceed",
    ) -> None:
        self._lock = gates.lock(destination)
        self.destination = destination
        self.timeout = timeout
        self.when_held = when_held

    def acquire(self, timeout: float) -> bool:
        """Take the gate, waiting at most ``timeout`` seconds; False if it stayed held."""
        return self._lock.acquire(timeout=timeout)

    def release(self) -> None:
        """Give back a gate taken with :meth:`acquire`."""
        self._lock.release()

    def run(self, commit: Callable[[], T]) -> T:
        """Call ``commit`` holding the gate; what happens after ``timeout`` is
        ``when_held``'s. Called on a writer thread; blocks."""
        held = self.acquire(self.timeout)
        if not held:
            if self.when_held == "retry":
                raise SinkError(
                    f"the commit gate of {self.destination} stayed held for {self.timeout:.0f}s",
                    ErrorClass.RETRYABLE,
                )
            logger.warning(
                "commit gate of %s held longer than %.1fs; committing without it",
                self.destination,
                self.timeout,
            )
        try:
            return commit()
        finally:
            if held:
                self.release()

    def close(self) -> None:
        """Release what the gate holds (nothing for the in-process gate)."""
