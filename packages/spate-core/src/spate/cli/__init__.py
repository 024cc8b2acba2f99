"""The ``spate`` command line: ``spate run``, ``spate validate``, ``spate plugins``."""

from spate.cli._logging import KeyValueFormatter, configure_logging
from spate.cli._main import EXIT_FAILED, EXIT_OK, EXIT_USAGE, build_parser, load_chain, main

__all__ = [
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_USAGE",
    "KeyValueFormatter",
    "build_parser",
    "configure_logging",
    "load_chain",
    "main",
]
