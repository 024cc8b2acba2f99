#!/usr/bin/env bash
# The whole check a change must pass: install, lint, type-check, docs, services, tests.
# Services are stopped again whatever happens. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/bootstrap.sh
export PATH="$PWD/.venv/bin:$PATH"
# The packaging tests build spate-avro-native's wheel with maturin, which needs cargo
# (without it they skip, saying so); maturin must never download a toolchain itself.
if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
  export PATH="$PATH:$HOME/.cargo/bin"
fi
export MATURIN_NO_INSTALL_RUST=1
export SPATE_TEST_SCALE="${SPATE_TEST_SCALE:-0.1}"

# Services start in the background while ruff, mypy and mkdocs run (the broker's JVM
# and the first download of its jars mostly wait); pytest waits for them.
# Services that were already running (a developer's own `make services-up`) are reused and
# left running; the ones this run starts are stopped again on exit, unless
# SPATE_KEEP_SERVICES=1. A run that finds none running starts from empty service data.
# postgres and connect start only when a CDC test asks (tests/support/cdc.py); when they
# were not running before, they are stopped on exit like the others.
services_started=""
services_pid=""
services_log=$(mktemp)
cleanup() {
  if [ -n "$services_pid" ]; then
    wait "$services_pid" 2>/dev/null || true
  fi
  if [ -n "$services_started" ] && [ "${SPATE_KEEP_SERVICES:-0}" != 1 ]; then
    # shellcheck disable=SC2086  # a list of service names
    scripts/services.sh down $services_started || true
  fi
  rm -f "$services_log"
}
trap cleanup EXIT
if [ -x scripts/services.sh ]; then
  running=$(scripts/services.sh status kafka nats s3 clickhouse postgres connect 2>/dev/null |
    awk '$2 == "running" { print $1 }' || true)
  if [ -z "$running" ]; then
    scripts/services.sh clean >/dev/null
  fi
  for name in kafka nats s3 clickhouse postgres connect; do
    if ! grep -qx "$name" <<<"$running"; then
      services_started="$services_started $name"
    fi
  done
  scripts/services.sh up >"$services_log" 2>&1 &
  services_pid=$!
fi

echo "== ruff"
ruff check .
ruff format --check .
echo "== mypy (spate-core)"
mypy
echo "== mkdocs build --strict"
mkdocs build --strict --quiet --site-dir "$(mktemp -d)"

if [ -n "$services_pid" ]; then
  echo "== services"
  services_status=0
  wait "$services_pid" || services_status=$?
  services_pid=""
  cat "$services_log"
  if [ "$services_status" -ne 0 ]; then
    echo "services: scripts/services.sh up failed (exit $services_status)" >&2
    exit "$services_status"
  fi
fi
echo "== pytest (SPATE_TEST_SCALE=$SPATE_TEST_SCALE)"
python -m pytest "$@"
