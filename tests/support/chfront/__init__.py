"""A test server that speaks ClickHouse's HTTP interface and executes on chDB.

Each process is one simulated replica with its own chDB data directory
(``python -m tests.support.chfront --port 18123 --data-dir DIR``); faults are injected
per process through ``/__control/`` or SIGUSR1 (recover). The ClickHouse sink and the
flagship pipeline prove their HTTP write path against it (retries, failover, timeouts,
dedup tokens: B9, B11, B12, B20, B29). Fixtures live in ``tests.support.chfront_fixtures``.

Importing this package does not load chDB; only the server modules do.
"""

from __future__ import annotations

CONTROL_PREFIX = "/__control/"
FAULT_MODES = ("5xx", "slow", "drop", "refuse")

__all__ = ["CONTROL_PREFIX", "FAULT_MODES"]
