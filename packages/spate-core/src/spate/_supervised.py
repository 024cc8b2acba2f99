"""A supervised pipeline from configuration: the ``supervisor:`` section (ADR 0003).

:func:`supervise` turns a loaded :class:`~spate.config.PipelineConfig` into a
:class:`~spate.pipeline.Supervisor` whose factory assembles a fresh pipeline from the
same configuration for every run, all on one meter, and an admin server that lives for
the whole supervised run (so a restart neither rebinds the port nor resets the
supervisor's counters). The pipelines themselves are built without an admin server.

Does not own: the restart rules (``spate.pipeline._supervisor``), the assembly of one
pipeline (``spate._assembly``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from spate._assembly import ChainsFn, assemble
from spate.admin._server import AdminServer
from spate.config.models import PipelineConfig, SupervisorConfig
from spate.metrics._meter import Meter
from spate.pipeline._builder import Pipeline
from spate.pipeline._exit import ExitReport
from spate.pipeline._supervisor import Supervisor
from spate.plugins._registry import Registry


@dataclass(frozen=True, slots=True)
class SupervisedRun:
    """A supervisor and the admin server that serves it (None for ``listen: none``)."""

    supervisor: Supervisor
    admin: AdminServer | None

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
) -> SupervisedRun:
    """Build the supervised run of ``config`` (its ``supervisor:`` rules by default).

    The first pipeline is assembled here, so a configuration problem raises at once
    (``ConfigError``, B29); later ones are assembled by the supervisor before each run.
    """
    rules = supervisor if supervisor is not None else config.supervisor
    meter = Meter(config.pipeline.name)
    quiet = dataclasses.replace(config, admin=dataclasses.replace(config.admin, listen="none"))
    first: list[Pipeline] = [
        assemble(quiet, registry=registry, chains=chains, meter=meter).pipeline
    ]

    def build() -> Pipeline:
        if first:
            return first.pop()
        return assemble(quiet, registry=registry, chains=chains, meter=meter).pipeline

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
