#!/usr/bin/env bash
# The soak (not in CI): the flagship for SOAK_MINUTES (default 30) at SOAK_RATE events/s
# (default 200) with network faults injected every few minutes; the report goes to
# SOAK_REPORT_DIR (default soak-report/). Needs the broker of scripts/services.sh: a
# broker already running is reused and left running, one started here is stopped again.
# Extra arguments go to `python -m tests.soak.soak` (see --help).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/bootstrap.sh
export PATH="$PWD/.venv/bin:$PATH"

started=""
cleanup() {
  if [ -n "$started" ] && [ "${SPATE_KEEP_SERVICES:-0}" != 1 ]; then
    scripts/services.sh down kafka || true
  fi
}
trap cleanup EXIT
if ! scripts/services.sh status kafka >/dev/null 2>&1; then
  started=kafka
fi
scripts/services.sh up kafka
python -m tests.soak.soak "$@"
