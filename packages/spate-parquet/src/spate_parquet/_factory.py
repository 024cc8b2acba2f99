"""The entry point ``spate.sinks`` → ``parquet``: builds the sink from its config.

Nothing is touched here; the runtime's ``start()`` probes the destination (B29).
"""

from __future__ import annotations

from typing import ClassVar

from spate.plugins import BuildContext
from spate.sink.writebehind import CommitGate

from spate_parquet._gate import StoreGate, open_coordination_store
from spate_parquet._sink import ParquetSink
from spate_parquet.config import ParquetSinkConfig


def build_sink(config: ParquetSinkConfig, context: BuildContext) -> ParquetSink:
    """The sink for one ``parquet:`` section."""
    if config.gate == "coordination" and config.publish == "manifest":
        store = open_coordination_store(context.coordination, context)

        def gate(destination: str, timeout: float) -> CommitGate:
            return StoreGate(destination, timeout, store, gates=context.commit_gates)

        return ParquetSink(context.component, config, context.clock, context.io_threads, gate)
    return ParquetSink(
        context.component, config, context.clock, context.io_threads, context.commit_gates.gate
    )


class ParquetSinkFactory:
    """Builds a Parquet sink from ``sinks: {name: {parquet: ...}}``."""

    config_model: ClassVar[type[ParquetSinkConfig]] = ParquetSinkConfig

    @staticmethod
    def build(config: ParquetSinkConfig, context: BuildContext) -> ParquetSink:
        return build_sink(config, context)
