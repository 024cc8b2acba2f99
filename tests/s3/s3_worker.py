"""One instance of a coordinated S3 backfill, run as its own process by the S3 e2e tests.

    python tests/s3/s3_worker.py CONFIG EVENTS [PACE]

Runs the pipeline of ``CONFIG`` (S3 source → the test kit's file sink) and exits with the
run's exit code. ``PACE`` (seconds per 1000 records, default 0) slows the chain down so
that a test can hurt the job while it is still running, whatever the machine's speed.
Every start and stop of work on a split that the source logs (records
carrying ``s3_event``) is appended to ``EVENTS`` as a JSON line stamped with the
system-wide monotonic clock, so a test can check, across processes, that no split was
worked by two live instances at the same moment (B24).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time

from spate import Pipeline, load_config


class SplitEventLog(logging.Handler):
    """Appends the source's split start/stop log records to a JSON-lines file."""

    def __init__(self, path: str, instance: str) -> None:
        super().__init__(logging.INFO)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._instance = instance

    def emit(self, record: logging.LogRecord) -> None:
        event = getattr(record, "s3_event", None)
        if event is None:
            return
        line = {
            "t": time.monotonic(),
            "instance": self._instance,
            "event": event,
            "split": getattr(record, "s3_split", ""),
            "epoch": getattr(record, "s3_epoch", 0),
        }
        os.write(self._fd, json.dumps(line).encode() + b"\n")


def main() -> int:
    config_path, events_path = sys.argv[1], sys.argv[2]
    config = load_config(config_path)
    instance = str((config.coordination or {}).get("instance_id", os.getpid()))
    logging.basicConfig(
        level=logging.INFO,
        format=f"%(asctime)s {instance} %(levelname)s %(name)s %(message)s",
    )
    logging.getLogger().addHandler(SplitEventLog(events_path, instance))
    pipeline = Pipeline.from_config(config)
    pace = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    if pace > 0:
        seen = [0]

        def paced(value: object) -> object:
            seen[0] += 1
            if seen[0] % 100 == 0:
                time.sleep(pace / 10)
            return value

        pipeline.chains(lambda ctx: ctx.chain().map(paced).sink())
    report = pipeline.run()
    return report.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
