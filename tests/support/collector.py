"""The collector example (``examples/api_to_dataset.py``) end to end on loopback.

:func:`run_collector` starts the two test servers in this process — the API test server
(:mod:`tests.support.api_server`, a "latest readings" API whose answers overlap) and the
test server implementing the Hub's commit API (:mod:`tests.support.hub`) — runs the
example as its own process with short intervals, lets the API's sequence run to its
end, waits until the source's state file holds every reading served, stops the example
with SIGTERM and returns what the Hub test server holds. ``make demo-collector`` and
the example's test both use it.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.support.api_server import ApiServer, Readings, reading
from tests.support.hub import Commit, HubServer

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "api_to_dataset.py"
REPO = "spate-demo/station-readings"
TOKEN = "hf_collector_demo_token_not_secret_elsewhere"


@dataclass(frozen=True)
class CollectorRun:
    """What one run of the example left behind."""

    exit_code: int
    api_url: str
    hub_endpoint: str
    served: set[tuple[str, int]]
    """Every distinct reading the API test server answered with (station, timestamp)."""
    commits: list[Commit]
    files: dict[str, bytes]
    """The dataset's files after the run: path -> bytes."""
    spool: Path
    spool_entries: list[str]
    """What the spool directory holds after the run (empty after a clean drain)."""
    log: str


def _seen(state: Path) -> set[str]:
    try:
        return set(json.loads(state.read_text())["seen"])
    except (FileNotFoundError, json.JSONDecodeError, KeyError):
        return set()


def reading_id(n: int) -> tuple[str, int]:
    """(station, timestamp) of reading number ``n`` of the API test server."""
    value = reading(n)
    return str(value["station_id"]), int(str(value["timestamp"]))


def _key(station: str, timestamp: int) -> str:
    """A key as the state file holds it."""
    return json.dumps([station, timestamp], separators=(",", ":"))


def run_collector(
    workdir: Path,
    *,
    readings: int,
    poll: str = "1s",
    window: str = "10s",
    config: Path | None = None,
    timeout: float = 180.0,
    progress: Callable[[str], None] = lambda line: None,
) -> CollectorRun:
    """Run the example until the API's ``readings`` were all delivered, then SIGTERM it."""
    state_dir = workdir / "state"
    log_path = workdir / "collector.log"
    app = Readings(overlap=6, step=2, page_size=4, limit=readings)
    with ApiServer(app) as api, HubServer(token=TOKEN) as hub:
        hub.create_repo(REPO)
        progress(f"API test server at {api.url}/readings ({readings} readings, 3 stations)")
        progress(f"Hub test server (the Hub's commit API) at {hub.endpoint}, dataset {REPO}")
        env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
            READINGS_URL=f"{api.url}/readings",
            POLL_INTERVAL=poll,
            POLL_TIMEOUT="5s",
            STATE_DIR=str(state_dir),
            HF_ENDPOINT=hub.endpoint,
            HF_REPO=REPO,
            HF_TOKEN=TOKEN,
            WINDOW=window,
            CHECKPOINT_INTERVAL="200ms",
            SPATE_ADMIN_LISTEN="none",
        )
        argv = [sys.executable, str(EXAMPLE)] + (["--config", str(config)] if config else [])
        with log_path.open("wb") as err:
            proc = subprocess.Popen(argv, stdout=err, stderr=err, cwd=workdir, env=env)
        try:
            deadline = time.monotonic() + timeout
            expected = {_key(*reading_id(n)) for n in range(readings)}
            while not expected <= _seen(state_dir / "readings.state.json"):
                if proc.poll() is not None:
                    break
                if time.monotonic() > deadline:
                    raise AssertionError(
                        f"the collector did not deliver every reading in {timeout}s; "
                        f"log: {log_path.read_text(errors='replace')[-3000:]}"
                    )
                time.sleep(0.1)
            if proc.poll() is None:
                progress(f"all {readings} readings delivered and spooled; sending SIGTERM")
                proc.send_signal(signal.SIGTERM)
            try:
                exit_code = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise AssertionError(
                    f"the collector did not exit after SIGTERM; "
                    f"log: {log_path.read_text(errors='replace')[-3000:]}"
                ) from None
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        served = set(map(reading_id, app.served))
        spool = state_dir / "spool"
        return CollectorRun(
            exit_code=exit_code,
            api_url=api.url,
            hub_endpoint=hub.endpoint,
            served=served,
            commits=list(hub.commits),
            files=hub.files(REPO),
            spool=spool,
            spool_entries=sorted(p.name for p in spool.iterdir()) if spool.exists() else [],
            log=log_path.read_text(errors="replace"),
        )


def parquet_rows(data: bytes) -> list[dict[str, object]]:
    """The rows of one committed Parquet file."""
    import pyarrow.parquet as pq

    rows: list[dict[str, object]] = pq.read_table(io.BytesIO(data)).to_pylist()
    return rows
