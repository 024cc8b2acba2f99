#!/usr/bin/env bash
# `make demo-cdc`: install everything (idempotently), start the local services of the
# change-data-capture chain (the broker, the ClickHouse HTTP front, PostgreSQL and Kafka
# Connect with Debezium), then run examples/postgres_cdc_to_clickhouse.yaml on a workload
# and compare the source table with its ClickHouse tables (exit code 0 when they agree).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
scripts/services.sh up kafka clickhouse postgres connect
eval "$(scripts/services.sh env)"
exec .venv/bin/python scripts/demo_cdc.py "$@"
