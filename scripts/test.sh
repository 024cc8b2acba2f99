#!/usr/bin/env bash
# The whole check a change must pass: install, lint, type-check, docs, services, tests.
# Services are stopped again whatever happens. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/bootstrap.sh
export PATH="$PWD/.venv/bin:$PATH"
export SPATE_TEST_SCALE="${SPATE_TEST_SCALE:-0.1}"

echo "== ruff"
ruff check .
ruff format --check .
echo "== mypy (spate-core)"
mypy
echo "== mkdocs build --strict"
mkdocs build --strict --quiet --site-dir "$(mktemp -d)"

cleanup() {
  if [ -x scripts/services.sh ]; then
    scripts/services.sh down || true
  fi
}
trap cleanup EXIT
if [ -x scripts/services.sh ]; then
  scripts/services.sh up
fi
echo "== pytest (SPATE_TEST_SCALE=$SPATE_TEST_SCALE)"
python -m pytest "$@"
