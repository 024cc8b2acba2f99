"""``Pipeline``: the code-level constructor of a pipeline from already-built components.

``Pipeline(name, source, sinks, ...)`` takes a built source, named sinks and optionally a
deserializer; the operator chain comes from :meth:`Pipeline.chains` (the user's
``fn(ctx)``, compiled by :mod:`spate.ops`) or, without the ops layer, from a
``processor`` given directly. :meth:`Pipeline.run` blocks on the calling thread until
the run ends and returns an :class:`~spate.pipeline.ExitReport` (B14, B16); the pipeline
owns the deserializer it is given and closes it when ``run`` returns or raises.
``Pipeline.from_config`` (configuration assembly) builds the components through the
plugin registry and then calls this constructor.

No module-level state: the meter, clock, budget and run nonce belong to the pipeline,
so several pipelines can share a process (docs/concepts/architecture.md).
"""

from __future__ import annotations

import gc
import logging
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self

from spate._assembly import build_parts, close_deserializer, new_run_nonce
from spate._clock import Clock, SystemClock
from spate.admin._server import AdminServer
from spate.config._loader import load_config
from spate.config.models import (
    BackpressureConfig,
    CheckpointConfig,
    DeadLetterSettings,
    PipelineConfig,
    ReadinessConfig,
)
from spate.errors import ConfigError, SpateError, bare
from spate.flow._budget import InflightBudget
from spate.metrics._meter import Meter
from spate.ops._compile import compile_chain
from spate.ops._contract import BatchProcessor
from spate.ops._deadletter import DEAD_LETTER_COMPONENT, DeadLetter
from spate.pipeline._exit import ExitReport
from spate.pipeline._health import NotStartedHealth, PipelineHealth
from spate.pipeline._runtime import PipelineRuntime
from spate.pipeline._signals import ShutdownHandle, install_signal_handlers
from spate.plugins._registry import Registry, default_registry
from spate.sink._contract import Sink
from spate.sink._gate import CommitGates
from spate.sink._intents import RecordPosition
from spate.source._contract import Source

if TYPE_CHECKING:
    from spate.ops._deser import Deserializer, ManyDeserializer

logger = logging.getLogger(__name__)

ProcessorFactory = Callable[[Mapping[str, Sink]], BatchProcessor]
"""Builds the batch processor once the sinks are known."""

ChainsFn = Callable[[Any], Any]
"""The user's ``chains(ctx)`` function (the context and chain types live in ``spate.ops``)."""


class _HealthView:
    """Stable health object for services: follows the current run's runtime."""

    def __init__(self) -> None:
        self.target: PipelineHealth = NotStartedHealth()

    def readiness(self) -> tuple[bool, str]:
        return self.target.readiness()

    def liveness(self, stall_after: float) -> tuple[bool, str]:
        return self.target.liveness(stall_after)


class Pipeline:
    """One pipeline: source → (deserializer →) operator chain → sinks, with checkpoints."""

    def __init__(
        self,
        name: str,
        source: Source,
        sinks: Mapping[str, Sink],
        *,
        deserializer: Deserializer | ManyDeserializer | None = None,
        processor: BatchProcessor | ProcessorFactory | None = None,
        checkpoint: CheckpointConfig | None = None,
        backpressure: BackpressureConfig | None = None,
        clock: Clock | None = None,
        meter: Meter | None = None,
        run_nonce: str | None = None,
        budget: InflightBudget | None = None,
        poll_timeout: float = 0.1,
        lane_stall_after: float | None = None,
        handle_signals: bool = True,
        gc_threshold: int = 50_000,
        source_type: str = "source",
        status_interval: float = 30.0,
        dead_letter: Sink | None = None,
        dead_letter_settings: DeadLetterSettings | None = None,
        position: RecordPosition | None = None,
        readiness: ReadinessConfig | None = None,
    ) -> None:
        """Assemble a pipeline from built components; nothing connects until ``run()``.

        ``budget`` must be the same object the sinks were built with (their
        ``BuildContext.budget``); when omitted one is created from ``backpressure``
        (see :meth:`new_budget`) and sinks built afterwards must use :attr:`budget`.
        ``source_type`` labels the source's metric series (``component_type``): the
        source connector's name, as configuration assembly passes it.
        ``status_interval`` is the seconds between two status lines in the log (0: none).
        ``lane_stall_after`` is ``admin.lane_stall_after`` (None: the probe's
        ``stall_after``).
        ``dead_letter`` is the sink records under a ``dead_letter`` error policy go to,
        offered in ``dead_letter_settings.format`` (``kafka``; else ``row``) and under its
        limits (B71, B72); it runs, flushes and drains like the other sinks.
        ``readiness`` adds ``readiness.max_freshness`` to ``/readyz`` (B222).
        ``position`` is the cell effectively-once sinks were built with
        (``BuildContext.position``, B88): the chain sets it to each record's offset.
        """
        if not name.strip():
            raise ConfigError("pipeline.name", "must not be empty")
        if not sinks:
            raise ConfigError("sinks", "a pipeline needs at least one sink")
        self.name = name
        self.source = source
        self.sinks: dict[str, Sink] = dict(sinks)
        if dead_letter is not None and DEAD_LETTER_COMPONENT in self.sinks:
            raise ConfigError(
                f"sinks.{DEAD_LETTER_COMPONENT}",
                "is reserved for the dead-letter sink when there is one",
            )
        self.dead_letter = dead_letter
        self.dead_letter_settings = (
            dead_letter_settings if dead_letter_settings is not None else DeadLetterSettings()
        )
        self.deserializer = deserializer
        self.checkpoint = checkpoint if checkpoint is not None else CheckpointConfig()
        self.backpressure = backpressure if backpressure is not None else BackpressureConfig()
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.meter = meter if meter is not None else Meter(name)
        self.run_nonce = run_nonce if run_nonce is not None else new_run_nonce()
        self.budget = budget if budget is not None else self.new_budget(self.backpressure)
        self.poll_timeout = poll_timeout
        self.lane_stall_after = lane_stall_after
        self.handle_signals = handle_signals
        self.gc_threshold = gc_threshold
        self.source_type = source_type
        self.status_interval = status_interval
        self.readiness = readiness
        self._processor = processor
        self.position = position
        self._chains: ChainsFn | None = None
        self._services: list[tuple[Callable[[PipelineHealth], None], Callable[[], None]]] = []
        self._health = _HealthView()
        self._wake = threading.Event()
        self._shutdown = ShutdownHandle(self._wake)
        self._ran = False

    @staticmethod
    def new_budget(backpressure: BackpressureConfig) -> InflightBudget:
        """The in-flight byte budget for ``backpressure`` (create it before the sinks)."""
        return InflightBudget(backpressure.max_inflight_bytes)

    # -- building ---------------------------------------------------------------------

    def chains(self, fn: ChainsFn) -> Self:
        """Use the user's ``fn(ctx)`` operator chain; compiled when the run starts.

        Without ``chains`` (and without a ``processor``) decoded records go straight to
        the single sink.
        """
        self._chains = fn
        return self

    def add_service(
        self, start: Callable[[PipelineHealth], None], stop: Callable[[], None]
    ) -> Self:
        """Run a service (e.g. the admin server) alongside each ``run()``.

        ``start(health)`` is called before the source and sinks start, ``stop()`` after
        everything is closed, on the thread that calls ``run()``.
        """
        self._services.append((start, stop))
        return self

    @property
    def health(self) -> PipelineHealth:
        """Readiness and liveness of the current run (any thread)."""
        return self._health

    def request_stop(self, reason: str = "stop requested") -> None:
        """Start the drain from any thread, as SIGTERM does."""
        self._shutdown.request(reason)

    @classmethod
    def from_config(
        cls, config: PipelineConfig | str | os.PathLike[str], /, **overrides: Any
    ) -> Pipeline:
        """Build a pipeline from a configuration, through the plugin registry.

        ``config`` is a loaded :class:`~spate.config.PipelineConfig` or the path of a
        YAML file, loaded with :func:`~spate.config.load_config` through the
        ``registry`` override or the installed plugins.
        """
        if not isinstance(config, str | os.PathLike | PipelineConfig):
            raise TypeError(
                "Pipeline.from_config takes a PipelineConfig or the path of a YAML file, "
                f"got {type(config).__name__}"
            )
        try:
            if isinstance(config, str | os.PathLike):
                registry = overrides.get("registry")
                config = load_config(
                    config, resolver=registry if registry is not None else default_registry()
                )
            pipeline = assemble(config, **overrides).pipeline
        except SpateError as exc:
            raise bare(exc, logger, "building the pipeline") from None
        return pipeline

    def _build_processor(self) -> BatchProcessor:
        processor = self._processor
        if processor is not None and self._chains is not None:
            raise ConfigError("chains", "give either a processor or chains(fn), not both")
        if processor is not None:
            if isinstance(processor, BatchProcessor):
                return processor
            return processor(self.sinks)
        # No processor: compile the user's chain, or (without one) send every decoded
        # record to the single sink.
        dead_letter = None
        if self.dead_letter is not None:
            dead_letter = DeadLetter(
                self.dead_letter,
                self.dead_letter_settings,
                meter=self.meter,
                pipeline=self.name,
                kafka_format=self.dead_letter_settings.format == "kafka",
            )
        try:
            return compile_chain(
                self._chains,
                deserializer=self.deserializer,
                sinks=self.sinks,
                meter=self.meter,
                pipeline=self.name,
                dead_letter=dead_letter,
                position=self.position,
            )
        except (TypeError, ValueError) as exc:
            raise ConfigError("chains", str(exc)) from exc

    def _runtime_sinks(self) -> dict[str, Sink]:
        """The sinks the runtime starts, ticks, drains and closes: the dead-letter one too."""
        if self.dead_letter is None:
            return self.sinks
        return {**self.sinks, DEAD_LETTER_COMPONENT: self.dead_letter}

    # -- running ----------------------------------------------------------------------

    def run(self) -> ExitReport:
        """Run until the source is drained, a signal arrives or the pipeline fails.

        Blocks the calling thread (the pipeline thread). On the main thread SIGTERM and
        SIGINT start the drain. Start-up errors (an unreachable endpoint, B29) raise
        before anything is consumed; everything after start-up ends in the report.
        """
        if self._ran:
            raise RuntimeError("a Pipeline runs once; build a new one to run again")
        self._ran = True
        try:
            return self._run()
        except SpateError as exc:
            raise bare(exc, logger, "start-up") from None
        finally:
            # However the run ended — completed, drained on a signal, failed, or never
            # started — the deserializer's resources (a registry fetch thread) go too.
            close_deserializer(self.deserializer, self.name)

    def _run(self) -> ExitReport:
        processor = self._build_processor()
        runtime = PipelineRuntime(
            name=self.name,
            source=self.source,
            sinks=self._runtime_sinks(),
            processor=processor,
            checkpoint=self.checkpoint,
            backpressure=self.backpressure,
            clock=self.clock,
            meter=self.meter,
            budget=self.budget,
            shutdown=self._shutdown,
            wake=self._wake,
            poll_timeout=self.poll_timeout,
            source_type=self.source_type,
            status_interval=self.status_interval,
            lane_stall_after=self.lane_stall_after,
            readiness=self.readiness,
        )
        self._health.target = runtime
        restore = install_signal_handlers(self._shutdown) if self.handle_signals else None
        gc_before = gc.get_threshold()
        if self.gc_threshold > 0:
            # Records and rows in flight are many short-lived containers; at Python's
            # default threshold (700) the collector rescans them constantly (see the
            # benchmarks page). Restored when the run ends.
            gc.set_threshold(self.gc_threshold, gc_before[1], gc_before[2])
        started: list[Callable[[], None]] = []
        try:
            for start, stop in self._services:
                start(self._health)
                started.append(stop)
            try:
                runtime.start()
            except BaseException:
                runtime.abort_start()
                raise
            logger.info("pipeline %s running (run nonce %s)", self.name, self.run_nonce)
            try:
                while runtime.step():
                    pass
            except Exception as exc:
                logger.exception("pipeline %s loop failed", self.name)
                runtime.fail(f"unexpected error: {exc}")
            if runtime.failure is not None:
                reason = runtime.failure
            elif self._shutdown.reason is not None:
                reason = self._shutdown.reason
            else:
                reason = "source drained"
            return runtime.finish(reason)
        finally:
            for stop in reversed(started):
                try:
                    stop()
                except Exception:
                    logger.exception("stopping a service of pipeline %s failed", self.name)
            if restore is not None:
                restore()
            gc.set_threshold(*gc_before)


@dataclass(frozen=True, slots=True)
class Assembly:
    """A pipeline built from configuration and the admin server that runs with it."""

    pipeline: Pipeline
    admin: AdminServer | None
    """None when ``admin.listen`` is ``none``."""
    config: PipelineConfig


def assemble(
    config: PipelineConfig,
    *,
    registry: Registry | None = None,
    chains: ChainsFn | None = None,
    clock: Clock | None = None,
    meter: Meter | None = None,
    run_nonce: str | None = None,
    handle_signals: bool = True,
    worker: tuple[int, int] | None = None,
    commit_gates: CommitGates | None = None,
) -> Assembly:
    """Build every component of ``config`` (:func:`spate._assembly.build_parts`) and wire
    the pipeline, with ``chains`` and the admin server as a service of the run.
    ``commit_gates``: the registry of commit-gate locks to build the sinks' gates from,
    shared by the pipelines of a process (B231); a new one when None."""
    parts = build_parts(
        config,
        registry=registry,
        clock=clock,
        meter=meter,
        run_nonce=run_nonce,
        worker=worker,
        commit_gates=commit_gates,
    )
    try:
        pipeline = Pipeline(
            config.pipeline.name,
            parts.source,
            parts.sinks,
            deserializer=parts.deserializer,
            checkpoint=config.checkpoint,
            backpressure=config.backpressure,
            clock=parts.clock,
            meter=parts.meter,
            run_nonce=parts.run_nonce,
            budget=parts.budget,
            handle_signals=handle_signals,
            gc_threshold=config.pipeline.gc_threshold,
            source_type=config.source.tag,
            status_interval=config.pipeline.status_interval,
            lane_stall_after=config.admin.lane_stall_after,
            dead_letter=parts.dead_letter,
            dead_letter_settings=parts.dead_letter_settings,
            position=parts.position,
            readiness=config.readiness,
        )
        if chains is not None:
            pipeline.chains(chains)
        if parts.admin is not None:
            pipeline.add_service(parts.admin.start, parts.admin.stop)
    except BaseException:
        close_deserializer(parts.deserializer, config.pipeline.name)
        raise
    return Assembly(pipeline=pipeline, admin=parts.admin, config=config)
