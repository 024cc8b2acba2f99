"""What ``/healthz`` and ``/readyz`` answer, from a pipeline's health view (B22).

Kept apart from the HTTP plumbing so the answers can be tested without a socket. A
health view that raises is reported as unhealthy (503) with the error, never as a
crashed request: an orchestrator must always get an answer.
"""

from __future__ import annotations

import logging
from typing import Protocol

logger = logging.getLogger(__name__)

OK = 200
UNAVAILABLE = 503


class HealthView(Protocol):
    """The part of ``spate.pipeline.PipelineHealth`` the probes read."""

    def readiness(self) -> tuple[bool, str]: ...

    def liveness(self, stall_after: float) -> tuple[bool, str]: ...


def healthz(health: HealthView | None, stall_after: float) -> tuple[int, str]:
    """200 while the pipeline makes progress; 503 when it stalled for ``stall_after`` s."""
    if health is None:
        return OK, "ok: no pipeline attached"
    try:
        alive, reason = health.liveness(stall_after)
    except Exception as exc:  # the probe must answer whatever the pipeline does
        logger.warning("liveness check failed: %s", exc, exc_info=True)
        return UNAVAILABLE, f"unhealthy: liveness check failed: {exc}"
    return (OK, f"ok: {reason}") if alive else (UNAVAILABLE, f"unhealthy: {reason}")


def readyz(health: HealthView | None) -> tuple[int, str]:
    """200 once lanes are assigned and every sink's probe passed; 503 before."""
    if health is None:
        return UNAVAILABLE, "not ready: no pipeline attached"
    try:
        ready, reason = health.readiness()
    except Exception as exc:
        logger.warning("readiness check failed: %s", exc, exc_info=True)
        return UNAVAILABLE, f"not ready: readiness check failed: {exc}"
    return (OK, f"ready: {reason}") if ready else (UNAVAILABLE, f"not ready: {reason}")
