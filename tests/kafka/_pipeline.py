"""Helpers of the Kafka delivery tests: a pipeline process per ``spate run`` on a YAML file.

The pipeline is Kafka source → (no deserializer unless one is given, no chain) → the test
kit's fsynced file sink, so every message value lands as one JSON string line. Producers
write each key as its own value, so the file's lines are the delivered keys.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

SPATE = Path(sys.executable).parent / "spate"


def write_config(
    path: Path,
    *,
    bootstrap: str,
    topic: str,
    group: str,
    out: Path,
    bounded: bool,
    name: str = "kafka-e2e",
    deserializer: Mapping[str, object] | None = None,
) -> Path:
    """The pipeline's JSON config; ``deserializer`` (a ``deserializer:`` section) decodes
    the values before they reach the file sink."""
    extra = {"deserializer": dict(deserializer)} if deserializer is not None else {}
    path.write_text(
        json.dumps(
            {
                **extra,
                "pipeline": {"name": name},
                "checkpoint": {"interval": "200ms", "drain_timeout": "15s"},
                "admin": {"listen": "none"},
                "source": {
                    "kafka": {
                        "brokers": bootstrap,
                        "topic": topic,
                        "group_id": group,
                        "commit_interval": "200ms",
                        "stop_at": "end" if bounded else "never",
                        "consume_batch": 500,
                        "rdkafka": {
                            "session.timeout.ms": 6000,
                            "heartbeat.interval.ms": 500,
                            "topic.metadata.refresh.interval.ms": 2000,
                        },
                    }
                },
                "sink": {"file": {"path": str(out), "max_rows": 500}},
            }
        )
    )
    return path


def start_pipeline(config: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as handle:
        return subprocess.Popen(
            [str(SPATE), "run", str(config)],
            stdout=handle,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )


def stop_pipeline(proc: subprocess.Popen[bytes], timeout: float = 60) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout)


def read_keys(path: Path) -> list[bytes]:
    """Every complete line of the file sink, as the key bytes it holds (torn tail skipped)."""
    if not path.exists():
        return []
    keys: list[bytes] = []
    for line in path.read_bytes().split(b"\n"):
        if not line:
            continue
        try:
            keys.append(json.loads(line).encode())
        except ValueError:
            continue
    return keys


def assignments_logged(log: Path) -> int:
    """How many times the pipelines writing to ``log`` were assigned partitions."""
    return log.read_text(errors="replace").count("partitions assigned") if log.exists() else 0


def wait_running(log: Path, before: int, timeout: float = 120) -> None:
    """Wait until a pipeline started after ``before`` assignments got its partitions."""
    import time

    deadline = time.monotonic() + timeout
    while assignments_logged(log) <= before:
        if time.monotonic() > deadline:
            raise AssertionError(f"no pipeline got partitions within {timeout:.0f}s")
        time.sleep(0.1)
