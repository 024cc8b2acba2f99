#!/usr/bin/env bash
# `make bench`: every benchmark, framework against its hand-written baseline (docs/development.md, performance rules).
# Installs what it needs, starts the local Kafka broker (benchmark data lives in a real
# broker) and leaves services it started running only if SPATE_KEEP_SERVICES=1.
# Size with SPATE_BENCH_RECORDS (default 1,000,000) and SPATE_BENCH_RUNS (default 3).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
export PATH="$PWD/.venv/bin:$PATH"

started=0
if ! scripts/services.sh status kafka >/dev/null 2>&1; then
  scripts/services.sh up kafka
  started=1
fi
cleanup() {
  if [ "$started" = 1 ] && [ "${SPATE_KEEP_SERVICES:-0}" != 1 ]; then
    scripts/services.sh down kafka || true
  fi
}
trap cleanup EXIT
set -a
# shellcheck disable=SC1091
. .services/env
set +a

for bench in chain_overhead deser kafka_source clickhouse_sink parquet_sink e2e spool bytes_per_core cdc; do
  echo
  echo "### bench/$bench.py"
  python "bench/$bench.py"
done
