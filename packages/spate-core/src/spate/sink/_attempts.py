"""What every write-behind loop of the sink does with one attempt: one place, used by all.

Three engines write behind the pipeline thread: the :class:`~spate.sink.SinkPool`'s
worker threads (ClickHouse, Kafka), the windowed writer of file and dataset sinks
(:mod:`spate.sink.writebehind`) and the spool tier's retry of batches its next tier
failed (:mod:`spate.sink.tiers._spool`). They queue different things (batches routed
over shards and replicas, sealed windows, spooled batches), but one attempt ends the
same way in each, and that is decided here and nowhere else (ADR 0014):

* :func:`attempt` runs a write: a ``SinkError`` is its verdict; any other exception is a
  bug in the writer, logged and turned into a FATAL ``SinkError`` (never retried);
* :func:`outcome` names the verdict: ``ok``, ``retryable``, ``record`` or ``fatal``;
* :func:`judge_breaker` tells a breaker (B11): only a retryable failure counts against
  the endpoint; a fatal or record error means it answered;
* :func:`retry_at` places the next attempt on the pipeline :class:`~spate.Clock` (B12):
  the backoff's delay after ``attempts`` failures, or None once the attempts ran out;

Settlement is shared the same way: each engine marks the holder of the acks (a batch, a
window) settled once under its own lock and releases its acks outside it with
:func:`spate.checkpoint._ack.release_all` (B2, B4, B39).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Literal

from spate.errors import ErrorClass, SinkError
from spate.sink._breaker import Breaker
from spate.sink._retry import Backoff

__all__ = ["Outcome", "attempt", "judge_breaker", "outcome", "retry_at"]

Outcome = Literal["ok", "retryable", "record", "fatal"]


def attempt(write: Callable[[], None], logger: logging.Logger, what: str) -> SinkError | None:
    """Run ``write``; None when it returned, else the ``SinkError`` that ends the attempt.

    An exception that is not a ``SinkError`` is logged (``what`` names the write) and
    becomes FATAL: a writer's bug is not an outage worth retrying."""
    try:
        write()
    except SinkError as exc:
        return exc
    except Exception as exc:
        logger.exception("%s raised an unexpected error; failing it", what)
        return SinkError(f"unexpected writer error: {exc!r}", ErrorClass.FATAL)
    return None


def outcome(error: SinkError | None) -> Outcome:
    """How an attempt ended, as the engines' metrics and logs name it."""
    if error is None:
        return "ok"
    if error.error_class is ErrorClass.RETRYABLE:
        return "retryable"
    return "record" if error.error_class is ErrorClass.RECORD else "fatal"


def judge_breaker(breaker: Breaker | None, result: Outcome, now: float) -> None:
    """Tell ``breaker`` how the attempt went (caller holds the engine's lock)."""
    if breaker is None:
        return
    if result == "retryable":
        breaker.failure(now)
    else:
        breaker.success()  # the endpoint answered: not an endpoint failure


def retry_at(backoff: Backoff, attempts: int, now: float) -> float | None:
    """When a batch that failed ``attempts`` times may try again, on the pipeline clock;
    None once ``retry.max_attempts`` is reached (the batch fails)."""
    if backoff.exhausted(attempts):
        return None
    return now + backoff.delay(attempts)
