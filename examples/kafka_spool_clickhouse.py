"""The flagship with a spool: Kafka → Avro → spool → one ClickHouse table per event kind.

The same pipeline as ``kafka_avro_to_clickhouse.py`` (its chain and tables), with each
sink a ``tiered`` sink: a fsynced spool on local disk (``SPOOL_DIR``) in front of the
ClickHouse sink. With ``SPOOL_ACK=spooled`` (the default here) Kafka offsets move on
once events are in the spool, so a ClickHouse outage does not stop consumption.

    KAFKA_BROKERS=localhost:9092 CLICKHOUSE_URL=http://localhost:8123 SPOOL_DIR=/var/spool/spate \\
        python examples/kafka_spool_clickhouse.py [--config FILE] [--no-create-tables]
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
CONFIG = HERE / "kafka_spool_clickhouse.yaml"


def flagship() -> ModuleType:
    """The flagship example beside this file (its chain, tables and ``main``)."""
    spec = importlib.util.spec_from_file_location("flagship", HERE / "kafka_avro_to_clickhouse.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if "--config" not in args:
        args = ["--config", str(CONFIG), *args]
    code: int = flagship().main(args)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
