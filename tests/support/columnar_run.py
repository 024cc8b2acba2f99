"""Run a pipeline from a YAML file and tell whether it ran on the columnar path.

The columnar executor announces itself with one INFO line (``runs on the columnar
path``) when the chain is compiled; the tests that must prove a pipeline ran columnar
(rather than falling back to rows) read that line.
"""

from __future__ import annotations

import logging
from pathlib import Path

from spate import ExitReport, Pipeline, load_config


class _Seen(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.columnar = False

    def emit(self, record: logging.LogRecord) -> None:
        self.columnar = self.columnar or "runs on the columnar path" in record.getMessage()


def run_yaml(path: Path | str) -> tuple[Pipeline, ExitReport, bool]:
    """Build and run the pipeline of ``path`` to its end: ``(pipeline, report, columnar)``."""
    seen = _Seen()
    logger = logging.getLogger("spate")
    logger.addHandler(seen)
    old_level = logger.level
    logger.setLevel(logging.INFO)
    try:
        pipeline = Pipeline.from_config(load_config(str(path)), handle_signals=False)
        report = pipeline.run()
    finally:
        logger.removeHandler(seen)
        logger.setLevel(old_level)
    return pipeline, report, seen.columnar
