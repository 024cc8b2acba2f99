"""What a coordinator tells its source: :class:`SplitEvent` (of a :class:`SplitEventKind`),
:class:`OwnedSplit` and the result of a fenced write, :class:`ProgressWrite` (B24).

The coordinator itself is :mod:`spate_coordination._core` (asynchronous) and
:mod:`spate_coordination._coordinator` (the thread-safe facade)."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from spate_coordination._records import (
    SplitSpec,
)


class SplitEventKind(enum.Enum):
    """What changed for this instance."""

    ASSIGNED = "assigned"
    """The split is now owned at ``epoch``: start (or resume from its progress)."""
    REVOKE_REQUESTED = "revoke_requested"
    """Drain the split, commit, then call ``release`` before ``deadline``."""
    FORCED = "forced"
    """The split is no longer owned (taken away, fenced or lease lapsed): stop at once."""
    JOB_COMPLETE = "job_complete"
    """Every planned split is completed (``split_id`` is empty)."""


@dataclass(frozen=True, slots=True)
class SplitEvent:
    """One notification; ``deadline`` is on the coordinator's monotonic clock."""

    kind: SplitEventKind
    split_id: str
    epoch: int = 0
    deadline: float | None = None
    reason: str = ""


@dataclass(frozen=True, slots=True)
class OwnedSplit:
    """A split this instance owns: work it and commit progress with ``epoch``."""

    split_id: str
    epoch: int
    spec: SplitSpec
    revoke_requested: bool = False
    deadline: float | None = None


class ProgressWrite(enum.Enum):
    """Result of a fenced write."""

    ACCEPTED = "accepted"
    FENCED = "fenced"
    """Refused: this instance no longer owns the split at that epoch (B24)."""


Listener = Callable[[SplitEvent], None]


__all__ = ["Listener", "OwnedSplit", "ProgressWrite", "SplitEvent", "SplitEventKind"]
