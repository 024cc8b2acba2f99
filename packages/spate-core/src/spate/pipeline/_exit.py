"""The exit report a pipeline run returns, and its exit code (B14, B16).

``completed`` means every registered batch was delivered and its position committed,
with nothing abandoned; anything else is ``failed``. ``spate run`` exits with
:attr:`ExitReport.exit_code`: 0 for completed, 1 for failed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from spate._secrets import redact
from spate.records import Lane

ExitState = Literal["completed", "failed"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ExitReport:
    """What a finished run did: outcome, counts and the final committed positions."""

    pipeline: str
    state: ExitState
    reason: str
    """Why the run ended (``source drained``, ``signal SIGTERM``, the failure)."""
    records_in: int = 0
    """Records polled from the source."""
    records_delivered: int = 0
    """Records of batches that were durably written (or dropped on purpose): includes
    the :attr:`dropped` ones, whose positions are committed like the written ones."""
    records_failed: int = 0
    """Records of batches that failed (a sink gave up or abandoned them)."""
    batches_in: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    """Records taken in and left out on purpose, by reason (B3, B42): skipped by an error policy
    (``malformed``, ``schema_unavailable``, ``error``, ``record_error``), routed nowhere
    under ``unrouted='skip'`` (``unrouted``), or filtered (``filter``, ``flat_map_empty``,
    ``empty``)."""
    source_dropped: dict[str, int] = field(default_factory=dict)
    """Items a source left out before handing them over, by reason (B42): duplicates of
    an overlapping poll, responses or records it could not read. They are not among
    :attr:`records_in`."""
    abandoned_batches: int = 0
    """Batches left unresolved or failed at the end: replayed by the next owner."""
    revoked_batches_dropped: int = 0
    """Batches of revoked lanes left unfinished at the revoke barrier (the next owner
    replays them); normal during rebalances, so they do not fail the run."""
    abandoned_rows: int = 0
    """Rows the sinks dropped unwritten at the end (B4)."""
    late_rows: dict[str, int] = field(default_factory=dict)
    """Rows written to a ``late_data`` side table instead of their sink's, by table
    (B242). Written, so among :attr:`records_delivered`; shown apart."""
    final_watermarks: dict[Lane, int] = field(default_factory=dict)
    """Committable position per lane at the end (what the tracker proved delivered)."""
    committed: dict[Lane, int] = field(default_factory=dict)
    """Last position handed to the source per lane during the run."""
    duration_seconds: float = 0.0

    def __post_init__(self) -> None:
        # The reason is often an exception's text: never let it carry a secret (B67).
        object.__setattr__(self, "reason", redact(self.reason))

    @property
    def records_dropped(self) -> int:
        """Records left out on purpose, all reasons together."""
        return sum(self.dropped.values())

    @property
    def exit_code(self) -> int:
        return 0 if self.state == "completed" else 1

    def summary(self, *, with_reason: bool = True) -> str:
        """One line for logs and the CLI (``with_reason=False`` when the reason was logged)."""
        marks = ", ".join(f"{lane}={pos}" for lane, pos in sorted(self.final_watermarks.items()))
        why = f" ({self.reason})" if with_reason else ""
        return (
            f"pipeline {self.pipeline} {self.state}{why}: {self.counts()} "
            f"abandoned_batches={self.abandoned_batches} "
            f"abandoned_rows={self.abandoned_rows} watermarks=[{marks}]"
        )

    def counts(self) -> str:
        """The record counts of :meth:`summary`: ``records in=... delivered=... dropped=...
        (by reason) [source_dropped=... (by reason)] [late_rows=... (by table)] failed=...``."""
        reasons = ", ".join(f"{why}={n}" for why, n in sorted(self.dropped.items()))
        dropped = f"dropped={self.records_dropped}" + (f" ({reasons})" if reasons else "")
        if self.source_dropped:
            before = ", ".join(f"{w}={n}" for w, n in sorted(self.source_dropped.items()))
            total = sum(self.source_dropped.values())
            dropped += f" source_dropped={total} ({before})"
        if self.late_rows:
            tables = ", ".join(f"{t}={n}" for t, n in sorted(self.late_rows.items()))
            dropped += f" late_rows={sum(self.late_rows.values())} ({tables})"
        return (
            f"records in={self.records_in} delivered={self.records_delivered} {dropped} "
            f"failed={self.records_failed}"
        )
