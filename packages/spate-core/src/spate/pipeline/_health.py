"""The health view the admin server reads: readiness and liveness (B22).

:class:`PipelineHealth` is the protocol; the runtime implements it. Both methods may be
called from any thread (the admin server's) and never block on the pipeline thread.
"""

from __future__ import annotations

from typing import Protocol


class PipelineHealth(Protocol):
    """What ``/readyz`` and ``/healthz`` ask a pipeline."""

    def readiness(self) -> tuple[bool, str]:
        """True once lanes are assigned (or the source started handing out data, for a
        source without assignment) and every sink's ``ready()`` is True."""
        ...

    def liveness(self, stall_after: float) -> tuple[bool, str]:
        """False when the pipeline thread or the sinks made no progress for
        ``stall_after`` seconds while work is pending, or a watermark is stuck while
        data flows."""
        ...


class NotStartedHealth:
    """Health of a pipeline whose run has not begun: alive, not ready."""

    def readiness(self) -> tuple[bool, str]:
        return False, "pipeline not started"

    def liveness(self, stall_after: float) -> tuple[bool, str]:
        return True, "pipeline not started"
