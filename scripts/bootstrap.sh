#!/usr/bin/env bash
# Create .venv and install every distribution editable plus the development tools.
# Idempotent: re-runs pip only when a pyproject.toml, the Rust extension's sources or this
# script changed.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
if ! "$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'; then
  echo "bootstrap: Python >= 3.11 is required (found $("$PY" --version 2>&1))" >&2
  exit 1
fi
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi

# spate-avro-native is a Rust extension (PyO3, built by maturin): pip builds it with cargo.
if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
  export PATH="$HOME/.cargo/bin:$PATH"
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "bootstrap: a Rust toolchain (cargo) is required to build packages/spate-avro-native;" \
    "install it with rustup (https://rustup.rs) and run this script again" >&2
  exit 1
fi

stamp_input=$(cat pyproject.toml packages/*/pyproject.toml packages/*/Cargo.toml packages/*/src/*.rs \
  examples/connectors/*/pyproject.toml requirements-dev.txt scripts/bootstrap.sh | sha256sum | cut -d' ' -f1)
if [ -f .bootstrap-stamp ] && [ "$(cat .bootstrap-stamp)" = "$stamp_input" ]; then
  exit 0
fi

.venv/bin/python -m pip install --quiet --upgrade pip
editables=()
for d in packages/*/; do
  editables+=(-e "$d")
done
# Every connector with its optional extras, so the whole suite can run; the example
# third-party connector too, so its conformance tests run with everything else.
.venv/bin/python -m pip install --quiet \
  -r requirements-dev.txt \
  "${editables[@]}" \
  -e examples/connectors/spate-sqlite \
  -e "packages/spate-coordination[nats]" \
  -e "packages/spate-clickhouse[embedded,columnar]" \
  -e "packages/spate-avro[columnar]" \
  -e "packages/spate-json[columnar]"
echo "$stamp_input" > .bootstrap-stamp
