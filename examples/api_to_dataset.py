"""A collector: an HTTP API polled every minute → spool → a Hugging Face dataset, hourly.

Polls a "latest readings" API (``READINGS_URL``), delivers each reading once (by station
and timestamp, remembered in a state file under ``STATE_DIR``), spools it on local disk
and commits each hour's readings to the dataset repository ``HF_REPO`` as Parquet, one
file per station. SIGTERM or Ctrl-C drains: the open hour is committed and the spool
directory is left empty. The configuration is ``api_to_dataset.yaml`` beside this file,
or the same pipeline in TOML with ``--config examples/api_to_dataset.toml``.

    READINGS_URL=https://api.example.com/v1/readings HF_REPO=my-org/weather-readings \\
        HF_TOKEN=hf_... python examples/api_to_dataset.py [--config FILE]

``make demo-collector`` runs it against the local test servers (an API test server and a
test server implementing the Hub's commit API) with intervals of seconds.
"""

from __future__ import annotations

import argparse
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from spate import Pipeline, load_config
from spate.cli import configure_logging

CONFIG = Path(__file__).resolve().with_suffix(".yaml")


def row(reading: dict[str, Any]) -> dict[str, Any]:
    """One dataset row per reading: the epoch timestamp also as a UTC datetime."""
    timestamp = int(reading["timestamp"])
    return {
        "station_id": str(reading["station_id"]),
        "timestamp": timestamp,
        "observed_at": datetime.fromtimestamp(timestamp, UTC),
        "value": float(reading["value"]),
    }


def chains(ctx: Any) -> Any:
    return ctx.chain().map(row)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--config", type=Path, default=CONFIG, help="YAML or TOML file")
    args = parser.parse_args(argv)
    configure_logging("info")  # as `spate run` logs: key=value lines, secrets scrubbed
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per request
    report = Pipeline.from_config(load_config(args.config)).chains(chains).run()
    return report.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
