#!/usr/bin/env bash
# `make demo`: install everything (idempotently), then run the flagship end to end.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
exec .venv/bin/python scripts/demo.py "$@"
