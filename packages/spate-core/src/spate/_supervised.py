"""A supervised pipeline from configuration: the ``supervisor:`` section (ADR 0008).

:func:`supervise` turns a loaded :class:`~spate.config.PipelineConfig` into a
:class:`~spate.pipeline.Supervisor` whose factory assembles a fresh pipeline from the
same configuration for every run, all on one meter, and an admin server that lives for
the whole supervised run (so a restart neither rebinds the port nor resets the
supervisor's counters). The pipelines themselves are built without an admin server.

:func:`run_side_by_side` runs several such runs (or plain pipelines) in one process,
one thread each, isolated from each other (B65).

Does not own: the restart rules (``spate.pipeline._supervisor``), the assembly of one
pipeline (``spate.pipeline._builder.assemble``).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from spate.admin._server import AdminServer
from spate.config.models import PipelineConfig, SupervisorConfig
from spate.metrics._meter import Meter
from spate.pipeline._builder import ChainsFn, Pipeline, assemble
from spate.pipeline._exit import ExitReport
from spate.pipeline._signals import ShutdownHandle, install_signal_handlers
from spate.pipeline._supervisor import Supervisor
from spate.plugins._registry import Registry
from spate.sink._gate import CommitGates

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SupervisedRun:
    """A supervisor and the admin server that serves it (None for ``listen: none``)."""

    supervisor: Supervisor
    admin: AdminServer | None

    @property
    def name(self) -> str:
        return self.supervisor.name

    def request_stop(self, reason: str = "stop requested") -> None:
        """Drain the current run and restart nothing more (any thread)."""
        self.supervisor.request_stop(reason)

    def run(self) -> ExitReport:
        """Serve the admin endpoint, run the supervisor, stop serving (blocks)."""
        if self.admin is not None:
            self.admin.start(self.supervisor.health)
        try:
            return self.supervisor.run()
        finally:
            if self.admin is not None:
                self.admin.stop()


def supervise(
    config: PipelineConfig,
    *,
    registry: Registry | None = None,
    chains: ChainsFn | None = None,
    supervisor: SupervisorConfig | None = None,
    handle_signals: bool = True,
    worker: str = "0",
    commit_gates: CommitGates | None = None,
) -> SupervisedRun:
    """Build the supervised run of ``config`` (its ``supervisor:`` rules by default).

    The first pipeline is assembled here, so a configuration problem raises at once
    (``ConfigError``, B29); later ones are assembled by the supervisor before each run.
    Every run builds its commit gates from ``commit_gates`` (one registry of the
    supervised run when None, B231).
    """
    gates = commit_gates if commit_gates is not None else CommitGates()
    rules = supervisor if supervisor is not None else config.supervisor
    meter = Meter(config.pipeline.name)
    quiet = dataclasses.replace(config, admin=dataclasses.replace(config.admin, listen="none"))
    first: list[Pipeline] = [
        assemble(quiet, registry=registry, chains=chains, meter=meter, commit_gates=gates).pipeline
    ]

    def build() -> Pipeline:
        if first:
            return first.pop()
        return assemble(
            quiet, registry=registry, chains=chains, meter=meter, commit_gates=gates
        ).pipeline

    admin = None
    if config.admin.listen != "none":
        admin = AdminServer(
            config.admin.listen,
            registry=meter.registry if config.metrics.exporter == "prometheus" else None,
            stall_after=config.admin.stall_after,
            pipeline=config.pipeline.name,
        )
    return SupervisedRun(
        supervisor=Supervisor(
            build,
            rules,
            name=config.pipeline.name,
            meter=meter,
            handle_signals=handle_signals,
            worker=worker,
        ),
        admin=admin,
    )


class _Run(Protocol):
    @property
    def name(self) -> str: ...

    def run(self) -> ExitReport: ...

    def request_stop(self, reason: str = ...) -> None: ...


def run_side_by_side(runs: Sequence[_Run]) -> list[ExitReport]:
    """Run independent pipelines side by side in this process, one thread each (B65).

    Each run keeps its own meter, admin server, supervisor and drain; a failure of one
    does not stop the others. SIGTERM/SIGINT (on the main thread) drain every run.
    Returns the reports in the order of ``runs`` once every run has ended.
    """
    reports: list[ExitReport | None] = [None] * len(runs)

    def body(index: int, run: _Run) -> None:
        try:
            reports[index] = run.run()
        except Exception as exc:  # a start-up failure of this run only
            logger.error("pipeline %s failed to start: %s", run.name, exc)
            text = " ".join(str(exc).split()) or type(exc).__name__
            reports[index] = ExitReport(pipeline=run.name, state="failed", reason=text)

    threads = [
        threading.Thread(target=body, args=(i, run), name=f"spate-{run.name}", daemon=True)
        for i, run in enumerate(runs)
    ]
    handle = _StopAll(runs)
    restore = install_signal_handlers(handle)
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(0.2)  # short joins keep the main thread free for signals
    finally:
        restore()
    return [r for r in reports if r is not None]


class _StopAll(ShutdownHandle):
    def __init__(self, runs: Sequence[_Run]) -> None:
        super().__init__()
        self._runs = runs

    def request(self, reason: str) -> None:
        super().request(reason)
        for run in self._runs:
            run.request_stop(reason)
