"""The shape of a CLI subcommand contributed through the ``spate.commands`` group.

A distribution adds ``spate <name>`` by declaring::

    [project.entry-points."spate.commands"]
    datagen = "spate_datagen.cli:DatagenCommand"

The entry point names an object (instance or class with class-level members) that has a
one-line ``help``, a ``configure(parser)`` that adds its arguments to the subcommand's
``argparse`` parser, and a ``run(args)`` returning the process exit code. Logging is
already configured by the CLI when ``run`` is called.
"""

from __future__ import annotations

import argparse
from typing import Protocol, runtime_checkable


@runtime_checkable
class Command(Protocol):
    """A ``spate`` subcommand from another distribution."""

    help: str

    def configure(self, parser: argparse.ArgumentParser) -> None:
        """Add this command's arguments to ``parser``."""
        ...

    def run(self, args: argparse.Namespace) -> int:
        """Run the command; return the exit code (0 success, 1 failure, 2 usage)."""
        ...
