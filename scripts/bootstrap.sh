#!/usr/bin/env bash
# Create .venv and install every distribution editable plus the development tools.
# Idempotent: re-runs pip only when a pyproject.toml, the Rust extension's sources, this
# script or the presence of cargo changed.
#
# Needs Python >= 3.11 only. With cargo (https://rustup.rs) it also builds
# packages/spate-avro-native, the compiled datum scanner of the columnar Avro path; without
# cargo that one distribution is skipped (everything else, `make demo` included, works
# without it) and a note says so. maturin is never allowed to download a Rust toolchain by
# itself (MATURIN_NO_INSTALL_RUST). SPATE_BOOTSTRAP_PLAN=1 prints what would be installed
# and exits.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
if ! "$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'; then
  echo "bootstrap: Python >= 3.11 is required (found $("$PY" --version 2>&1))" >&2
  exit 1
fi

# maturin's build backend fetches a whole Rust toolchain into a cache when cargo is
# missing (hundreds of MB, silently): never here.
export MATURIN_NO_INSTALL_RUST=1
if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
  export PATH="$HOME/.cargo/bin:$PATH"
fi
native=0
if command -v cargo >/dev/null 2>&1; then
  native=1
fi

editables=()
for d in packages/*/; do
  if [ "$native" -eq 0 ] && [ "$d" = packages/spate-avro-native/ ]; then
    continue
  fi
  editables+=(-e "$d")
done
# Every connector with its optional extras, so the whole suite can run; the example
# third-party connector too, so its conformance tests run with everything else. The Avro
# columnar extra needs spate-avro-native (and so cargo).
# Without cargo the rest of that extra (its pure-Python and wheel-only dependencies) is
# still installed, so the type check and the tests that need no native scanner run.
avro="packages/spate-avro"
avro_rest=()
if [ "$native" -eq 1 ]; then
  avro="packages/spate-avro[columnar]"
else
  mapfile -t avro_rest < <("$PY" -c '
import tomllib
with open("packages/spate-avro/pyproject.toml", "rb") as f:
    extra = tomllib.load(f)["project"]["optional-dependencies"]["columnar"]
print("\n".join(d for d in extra if not d.startswith("spate-avro-native")))
')
fi
extras=(
  -e examples/connectors/spate-sqlite
  -e "packages/spate-coordination[nats]"
  -e "packages/spate-clickhouse[embedded,columnar]"
  -e "$avro"
  -e "packages/spate-json[columnar]"
  -e "packages/spate-protobuf[columnar]"
  ${avro_rest[@]+"${avro_rest[@]}"}
)
if [ "${SPATE_BOOTSTRAP_PLAN:-0}" = 1 ]; then
  echo "native=$native"
  echo "MATURIN_NO_INSTALL_RUST=$MATURIN_NO_INSTALL_RUST"
  printf '%s\n' "${editables[@]}" "${extras[@]}"
  exit 0
fi

stamp_input=$( (cat pyproject.toml packages/*/pyproject.toml packages/*/Cargo.toml packages/*/src/*.rs \
  examples/connectors/*/pyproject.toml requirements-dev.txt scripts/bootstrap.sh && echo "native=$native") |
  sha256sum | cut -d' ' -f1)
if [ -f .bootstrap-stamp ] && [ "$(cat .bootstrap-stamp)" = "$stamp_input" ]; then
  exit 0
fi

if [ "$native" -eq 0 ]; then
  echo "bootstrap: cargo not found, so packages/spate-avro-native (the columnar Avro path's" \
    "compiled scanner) is skipped; everything else works without it. To add it, install" \
    "Rust with rustup (https://rustup.rs) and run this script again." >&2
fi
if [ ! -x .venv/bin/python ]; then
  echo "bootstrap: creating .venv"
  "$PY" -m venv .venv
fi
echo "bootstrap: installing every distribution editable with the development tools into" \
  ".venv (a few minutes the first time; pip's progress follows)"
.venv/bin/python -m pip install --quiet --upgrade pip
# pip's own lines for each package collected, built and installed (its errors go to
# stderr unfiltered); the exit status is pip's, not grep's.
set +e
.venv/bin/python -m pip install --progress-bar off \
  -r requirements-dev.txt \
  "${editables[@]}" \
  "${extras[@]}" |
  grep --line-buffered -E '^(Collecting|Building|Successfully|Installing collected)'
status=${PIPESTATUS[0]}
set -e
if [ "$status" -ne 0 ]; then
  echo "bootstrap: pip install failed (exit $status, see above)" >&2
  exit 1
fi
echo "$stamp_input" > .bootstrap-stamp
echo "bootstrap: .venv is ready"
