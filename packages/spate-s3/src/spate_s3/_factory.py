"""Entry-point factory of spate-s3 (``spate.sources`` → ``s3``).

Owns :class:`S3SourceFactory`: it decodes the top-level ``coordination`` section that
the assembly hands over in :class:`~spate.plugins.BuildContext` (B24), opens the
configured coordination store for the job, and builds an :class:`S3Source`. Without a
``coordination`` section the job runs alone on an in-memory store named after the
pipeline (progress then lives only as long as the process). Checks at build time what
can be checked without the network: ``framing: avro_ocf`` needs fastavro (B26, B29).
"""

from __future__ import annotations

import logging
import re
from typing import ClassVar

from spate.errors import ConfigError
from spate.plugins import BuildContext
from spate_coordination import CoordinationConfig, load_coordination_config

from spate_s3._framing import require_fastavro
from spate_s3._source import S3Source
from spate_s3.config import S3SourceConfig

logger = logging.getLogger(__name__)


def default_coordination(pipeline: str) -> CoordinationConfig:
    """A single-instance job on an in-memory store, named after the pipeline."""
    job = re.sub(r"[^A-Za-z0-9_-]", "-", pipeline) or "s3-backfill"
    return CoordinationConfig(store={"memory": {}}, job=job)


class S3SourceFactory:
    """Builds an :class:`S3Source` from ``source: {s3: ...}`` and ``coordination:``."""

    config_model: ClassVar[type[S3SourceConfig]] = S3SourceConfig

    @staticmethod
    def build(config: S3SourceConfig, context: BuildContext) -> S3Source:
        if config.framing == "avro_ocf":
            try:
                require_fastavro()
            except ImportError as exc:
                raise ConfigError("source.s3.framing", str(exc)) from None
        if context.coordination is None:
            coordination = default_coordination(context.pipeline)
            logger.info(
                "no coordination section: job %s runs alone on an in-memory store",
                coordination.job,
            )
        else:
            coordination = load_coordination_config(context.coordination)
        store = coordination.open_store(context)
        return S3Source(
            config,
            coordination,
            store,
            meter=context.meter,
            clock=context.clock,
        )
