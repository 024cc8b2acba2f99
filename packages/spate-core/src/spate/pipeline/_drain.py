"""The one drain routine shared by SIGTERM/SIGINT, revocation and the end of a bounded
source (B14, B15).

Draining means: stop intake (the caller no longer polls new data), finish the batches
already taken as far as the sinks let them, seal and write every sink buffer (on
revocation only the buffers holding the revoked lanes' rows, B40), and give up at
``deadline``. The caller then commits synchronously what the tracker proves
delivered and abandons the rest (final drain) or forgets it (revocation). This module
holds the write phase, which is the same for all three triggers.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from typing import Protocol

from spate._clock import Clock
from spate.errors import FatalError
from spate.records import Lane
from spate.sink._contract import Sink, flush_lanes

logger = logging.getLogger(__name__)

_RETRY_PAUSE = 0.01
"""Pause between attempts while a batch waits for a record that is not ready yet."""


class DrainWork(Protocol):
    """The part of the runtime a drain drives (pipeline thread)."""

    def advance_backlog(self) -> bool:
        """Process taken batches as far as possible; True when some remain."""
        ...

    def beat(self) -> None:
        """Record pipeline-thread progress (liveness) during a long drain."""
        ...

    def fail(self, reason: str) -> None:
        """Fail the run (a record policy said fail while a sink flushed, B111)."""
        ...


def write_out(
    work: DrainWork,
    sinks: Mapping[str, Sink],
    clock: Clock,
    deadline: float,
    lanes: Collection[Lane] | None = None,
) -> bool:
    """Process the backlog and flush the sinks until all is written or ``deadline``.

    Returns True when nothing is left unwritten and no batch is left unprocessed.
    Sinks that refused rows are flushed, which frees room, and the stalled batch is
    resumed from its cursor (B8) until it completes or time runs out.

    With ``lanes`` (a revocation) the sinks write out only what they hold of those lanes
    once every taken batch is processed (:func:`~spate.sink.flush_lanes`, B40); while a
    batch still waits for room, every sink is flushed in full to make it.
    """
    while True:
        work.beat()
        remaining = work.advance_backlog()
        flushed = True
        for sink in sinks.values():
            try:
                if lanes is None or remaining:
                    done = sink.flush(deadline)
                else:
                    done = flush_lanes(sink, lanes, deadline)
                if not done:
                    flushed = False
            except FatalError as exc:
                work.fail(str(exc))  # names the record a sink held (B111)
                flushed = False
            except Exception:
                logger.exception("sink %s failed while flushing for drain", sink.name)
                flushed = False
        now = clock.monotonic()
        if not remaining:
            return flushed
        if now >= deadline:
            logger.warning("drain deadline reached with batches still unprocessed")
            return False
        if flushed:
            # Everything offered is written, yet a batch still waits: a record that is not
            # ready (schema registry) or a sink that takes time to reopen. Retry shortly.
            clock.sleep(min(_RETRY_PAUSE, deadline - now))
