"""The supervisor: rebuild a failed pipeline from its factory, with backoff (ADR 0008).

:class:`Supervisor` runs ``build()`` → :meth:`Pipeline.run` in a loop on the calling
thread. A run that completes, or that ends because a stop was requested (SIGTERM,
SIGINT, :meth:`Supervisor.request_stop`), ends the loop with that run's report. A run
that fails — a fatal sink error, a lost source, a start-up error other than bad
configuration — is followed by a fresh pipeline from ``build()``, after a wait that
grows by ``multiplier`` from ``initial_backoff`` up to ``max_backoff``
(:class:`~spate.config.models.SupervisorConfig`). More than ``max_restarts`` failures
within ``window`` give up: one error line names the pipeline and its last error and the
report is ``failed`` (exit 1). A run that lasted ``healthy_after`` before failing resets
the count and the backoff.

The rebuilt pipeline starts from the positions its source committed, so nothing is
lost and records after the last commit are written again, as at-least-once allows
(B1, B14). Each build gets a new run nonce, so dedup tokens never repeat (B9).
Restarts, failures, give-ups and the pending wait are metrics labelled ``worker``.

Bad configuration (``ConfigError``, ``PluginError``) is never retried: no rebuild can fix
it, so it raises as it does without a supervisor (B29).

Does not own: worker processes (``spate.cli._processes`` applies the same rules to
them through :class:`RestartPolicy`), the pipeline's own drain (B14).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from spate._clock import Clock, SystemClock
from spate.config._units import format_duration
from spate.config.models import SupervisorConfig
from spate.errors import ConfigError, PluginError
from spate.metrics import names
from spate.metrics._meter import Meter
from spate.pipeline._builder import Pipeline
from spate.pipeline._exit import ExitReport
from spate.pipeline._health import NotStartedHealth, PipelineHealth
from spate.pipeline._signals import ShutdownHandle, install_signal_handlers

logger = logging.getLogger(__name__)

PipelineFactory = Callable[[], Pipeline]
"""Builds a fresh, not yet run pipeline (called once per run)."""


@dataclass(frozen=True, slots=True)
class RestartDecision:
    """What to do after a failure: wait ``delay`` seconds and restart, or give up."""

    give_up: bool
    delay: float
    failures: int
    """Failures counted within the window, this one included."""


class RestartPolicy:
    """The restart rules of one supervised thing (a pipeline or a worker process).

    Pure bookkeeping over a clock, shared by :class:`Supervisor` and the process parent:
    :meth:`failed` records a failure and decides; nothing here sleeps.
    """

    def __init__(self, config: SupervisorConfig, clock: Clock) -> None:
        self.config = config
        self._clock = clock
        self._failures: deque[float] = deque()

    def failed(self, ran_for: float) -> RestartDecision:
        """Record a failure of a run that lasted ``ran_for`` seconds and decide."""
        now = self._clock.monotonic()
        if ran_for >= self.config.healthy_after:
            # A healthy run in between: earlier failures were not consecutive.
            self._failures.clear()
        self._failures.append(now)
        while self._failures and now - self._failures[0] > self.config.window:
            self._failures.popleft()
        count = len(self._failures)
        give_up = count > self.config.max_restarts
        delay = 0.0 if give_up else self.config.backoff(count)
        return RestartDecision(give_up=give_up, delay=delay, failures=count)


class _HealthView:
    """Health of whichever pipeline runs now; not ready while waiting to restart."""

    def __init__(self) -> None:
        self.target: PipelineHealth = NotStartedHealth()
        self.waiting: str | None = None

    def readiness(self) -> tuple[bool, str]:
        if self.waiting is not None:
            return False, self.waiting
        return self.target.readiness()

    def liveness(self, stall_after: float) -> tuple[bool, str]:
        if self.waiting is not None:
            return True, self.waiting
        return self.target.liveness(stall_after)


class Supervisor:
    """Runs a pipeline built by ``build`` and rebuilds it after each failure.

    ``meter`` receives the supervisor's own metrics (a fresh one named ``name`` by
    default); hand the same meter to the pipelines ``build`` makes so one registry holds
    everything. ``handle_signals`` routes SIGTERM/SIGINT to :meth:`request_stop` while
    :meth:`run` is in progress (main thread only); the pipelines it builds then leave
    signals to the supervisor.
    """

    def __init__(
        self,
        build: PipelineFactory,
        config: SupervisorConfig | None = None,
        *,
        name: str = "spate",
        meter: Meter | None = None,
        clock: Clock | None = None,
        handle_signals: bool = True,
        worker: str = "0",
    ) -> None:
        self.config = config if config is not None else SupervisorConfig()
        self.name = name
        self._build = build
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._real_time = isinstance(self._clock, SystemClock)
        self.meter = meter if meter is not None else Meter(name)
        self.handle_signals = handle_signals
        self._wake = threading.Event()
        self._shutdown = ShutdownHandle(self._wake)
        self._lock = threading.Lock()
        self._current: Pipeline | None = None
        self._health = _HealthView()
        self.policy = RestartPolicy(self.config, self._clock)
        self.restarts = 0
        """Restarts made so far."""
        self.gave_up = False
        """True once the supervisor gave up (the report is then ``failed``)."""
        labels = {"component": "supervisor", "component_type": "supervisor", "worker": worker}
        self._failures_total = self.meter.counter(names.SUPERVISOR_FAILURES, **labels)
        self._restarts_total = self.meter.counter(names.SUPERVISOR_RESTARTS, **labels)
        self._give_ups_total = self.meter.counter(names.SUPERVISOR_GIVE_UPS, **labels)
        self._backoff = self.meter.gauge(names.SUPERVISOR_BACKOFF, **labels)

    @property
    def health(self) -> _HealthView:
        """Readiness and liveness of the current run (any thread), for the admin server."""
        return self._health

    def request_stop(self, reason: str = "stop requested") -> None:
        """Drain the running pipeline and restart nothing more (any thread, signal-safe)."""
        self._shutdown.request(reason)
        with self._lock:
            current = self._current
        if current is not None:
            current.request_stop(reason)

    def run(self) -> ExitReport:
        """Run, rebuild after failures, and return the last run's report.

        Blocks the calling thread. ``ConfigError`` and ``PluginError`` from ``build()``
        or a start-up raise at once; any other exception from them counts as a failure.
        """
        restore = install_signal_handlers(_Forward(self)) if self.handle_signals else None
        try:
            return self._loop()
        finally:
            if restore is not None:
                restore()

    def _loop(self) -> ExitReport:
        while True:
            started = self._clock.monotonic()
            report, error = self._run_once()
            ran_for = self._clock.monotonic() - started
            if report is not None and (report.exit_code == 0 or self._shutdown.requested):
                return report
            if report is None and self._shutdown.requested:
                return self._report(f"{self._shutdown.reason}; last error: {error}", ran_for)
            reason = report.reason if report is not None else error
            self._failures_total.inc()
            decision = self.policy.failed(ran_for)
            if decision.give_up:
                self.gave_up = True
                self._give_ups_total.inc()
                line = (
                    f"pipeline {self.name} gave up after {decision.failures} failures within "
                    f"{format_duration(self.config.window)} (supervisor.max_restarts="
                    f"{self.config.max_restarts}); last error: {reason}"
                )
                logger.error("%s", line)
                return self._report(line, ran_for, report)
            logger.warning(
                "pipeline %s failed (%d of at most %d within %s): %s; restarting in %s",
                self.name,
                decision.failures,
                self.config.max_restarts,
                format_duration(self.config.window),
                reason,
                format_duration(decision.delay),
            )
            if not self._wait(decision.delay, decision.failures):
                return self._report(f"{self._shutdown.reason} while waiting to restart", ran_for)
            self.restarts += 1
            self._restarts_total.inc()
            logger.info("pipeline %s restarting (restart %d)", self.name, self.restarts)

    def _run_once(self) -> tuple[ExitReport | None, str]:
        """Build and run one pipeline: its report, or None and the start-up error."""
        try:
            pipeline = self._build()
            pipeline.handle_signals = False
            with self._lock:
                self._current = pipeline
            if self._shutdown.requested:
                pipeline.request_stop(self._shutdown.reason or "stop requested")
            self._health.target = pipeline.health
            return pipeline.run(), ""
        except (ConfigError, PluginError):
            raise
        except Exception as exc:
            logger.debug("pipeline %s failed to start", self.name, exc_info=True)
            text = " ".join(str(exc).split()) or type(exc).__name__
            return None, f"{type(exc).__name__}: {text}"
        finally:
            with self._lock:
                self._current = None

    def _wait(self, delay: float, failures: int) -> bool:
        """Wait ``delay`` before a restart; False when a stop arrived meanwhile."""
        self._backoff.set(delay)
        self._health.waiting = f"restarting in {format_duration(delay)} after {failures} failure(s)"
        try:
            if self._real_time:
                deadline = self._clock.monotonic() + delay
                while not self._shutdown.requested:
                    left = deadline - self._clock.monotonic()
                    if left <= 0:
                        break
                    self._wake.wait(left)
                    self._wake.clear()
            else:
                self._clock.sleep(delay)
            return not self._shutdown.requested
        finally:
            self._backoff.set(0)
            self._health.waiting = None

    def _report(self, reason: str, ran_for: float, last: ExitReport | None = None) -> ExitReport:
        if last is not None:
            return dataclasses.replace(last, state="failed", reason=reason)
        return ExitReport(
            pipeline=self.name, state="failed", reason=reason, duration_seconds=ran_for
        )


class _Forward(ShutdownHandle):
    """The signal handlers' target: forwards a stop request to the supervisor."""

    def __init__(self, supervisor: Supervisor) -> None:
        super().__init__()
        self._supervisor = supervisor

    def request(self, reason: str) -> None:
        super().request(reason)
        self._supervisor.request_stop(reason)
