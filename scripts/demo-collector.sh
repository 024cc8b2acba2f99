#!/usr/bin/env bash
# `make demo-collector`: install everything (idempotently), then run the collector example
# (an API polled → spool → a Hugging Face dataset) against local test servers.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
exec .venv/bin/python scripts/demo_collector.py "$@"
