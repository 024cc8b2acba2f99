"""ClickHouse sink for spate (clickhouse-connect)."""

__version__ = "0.1.0"
