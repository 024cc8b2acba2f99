"""The ``sqlite:`` sink section, decoded strictly by :func:`spate.config.decode`.

Example::

    sink:
      sqlite:
        path: out/events.db           # created if missing (not its directory)
        table: events
        columns: [id, kind, amount]   # a row is a tuple in this order, or a dict
        create_table: true            # false: the table must exist with these columns
        busy_timeout: 5s              # how long a write waits for another writer's lock
        batch: {max_rows: 10000, linger: 500ms}
        retry: {initial: 100ms, max: 5s}
        on_record_error: fail         # fail | skip

Follows the config-model convention: a frozen keyword-only dataclass, a default for
every optional key, cross-field rules in ``config_errors`` (reported with their dotted
path, B17), and the sink pool's own sections embedded as they are, so every sink reads
alike in YAML.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

from spate.config import Duration
from spate.errors import ErrorPolicy
from spate.sink import BatchConfig, BreakerConfig, InflightConfig, PoolConfig, RetryConfig

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

TOKENS_TABLE = "_spate_tokens"
"""The table of applied dedup tokens, kept next to the data table (B9)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SqliteSinkConfig:
    """``sink: {sqlite: ...}``."""

    path: str
    """The database file (created if missing); its directory must exist."""
    columns: tuple[str, ...]
    """Column names, in the order of a tuple row; dict rows are read by these names; with
    one column a bare value (bytes, str, number) is a row too."""
    table: str = "events"
    """The table rows go to."""
    create_table: bool = True
    """Create the table (and the token table) at start-up if missing; with ``false`` the
    table must exist and have every column, or start-up fails naming what is missing."""
    busy_timeout: Duration = 5.0
    """How long one write waits for another connection's lock before it is retried."""
    synchronous: Literal["full", "normal"] = "full"
    """SQLite's ``PRAGMA synchronous``: ``full`` makes a written batch survive power loss."""
    dedup_window: int = 100_000
    """How many applied batch tokens are remembered (a retry within them lands once)."""
    batch: BatchConfig = field(default_factory=BatchConfig)
    inflight: InflightConfig = field(default_factory=InflightConfig)
    retry: RetryConfig = field(default_factory=RetryConfig)
    breaker: BreakerConfig = field(default_factory=BreakerConfig)
    on_record_error: ErrorPolicy = ErrorPolicy.FAIL
    """A row that cannot be stored (wrong arity, a missing column, an unsupported value):
    ``fail`` stops the pipeline, ``skip`` drops the row and counts it."""

    def config_errors(self) -> Iterator[tuple[str, str]]:
        if not self.path.strip():
            yield "path", "must not be empty"
        if not _IDENTIFIER.match(self.table):
            yield "table", f"must be a plain identifier, got {self.table!r}"
        elif self.table == TOKENS_TABLE:
            yield "table", f"{TOKENS_TABLE} is the sink's own token table"
        if not self.columns:
            yield "columns", "name at least one column"
        for i, name in enumerate(self.columns):
            if not _IDENTIFIER.match(name):
                yield f"columns[{i}]", f"must be a plain identifier, got {name!r}"
        if len(set(self.columns)) != len(self.columns):
            yield "columns", "a column is listed twice"
        if self.busy_timeout < 0:
            yield "busy_timeout", "must not be negative"
        if self.dedup_window < 1:
            yield "dedup_window", "must be at least 1"

    def pool_config(self) -> PoolConfig:
        """The sink pool's settings (batching, in-flight writes, retries, breaker)."""
        return PoolConfig.of(self)
