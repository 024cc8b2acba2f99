"""Entry-point factory of spate-datagen (``spate.sources`` → ``datagen``)."""

from __future__ import annotations

from typing import ClassVar

from spate.plugins import BuildContext

from spate_datagen._source import DatagenSource, DatagenSourceConfig


class DatagenSourceFactory:
    """Builds a :class:`DatagenSource` from ``source: {datagen: ...}``."""

    config_model: ClassVar[type[DatagenSourceConfig]] = DatagenSourceConfig

    @staticmethod
    def build(config: DatagenSourceConfig, context: BuildContext) -> DatagenSource:
        return DatagenSource(config)
