"""A pipeline process for the multi-process delivery tests: SequenceSource → FileSink.

Run as a script. The source's commits go to an offsets file and the sink appends
fsynced JSON lines, so both survive ``kill -9``. Prints the exit report as one JSON line
on stdout and exits with its exit code.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from spate.config.models import CheckpointConfig
from spate.pipeline import Pipeline
from spate.testing import CopyToSinkProcessor, FileSink, SealedBatch, SequenceSource
from spate.testing._buffered import Attempt


class StuckFileSink(FileSink):
    """Writes ``writes_left`` batches, then never completes another write."""

    writes_left = 0

    def _attempt(self, batch: SealedBatch) -> Attempt:
        if self.writes_left <= 0:
            return "wait"
        self.writes_left -= 1
        return super()._attempt(batch)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--offsets", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--pace", type=float, default=0.0)
    parser.add_argument("--interval", type=float, default=0.1)
    parser.add_argument("--drain-timeout", type=float, default=5.0)
    parser.add_argument(
        "--stuck-after",
        type=int,
        default=-1,
        help="write this many batches, then never complete a write again",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)

    source = SequenceSource(
        args.offsets,
        partitions=args.partitions,
        records_per_lane=args.records,
        batch_size=args.batch,
        pace=args.pace,
    )
    sink: FileSink
    if args.stuck_after >= 0:
        sink = StuckFileSink(args.out, "out", max_rows=args.batch, threaded=True)
        sink.writes_left = args.stuck_after
    else:
        sink = FileSink(args.out, "out", max_rows=args.batch, threaded=True)
    pipeline = Pipeline(
        "e2e",
        source,
        {"out": sink},
        processor=CopyToSinkProcessor(sink, as_text=True),
        checkpoint=CheckpointConfig(interval=args.interval, drain_timeout=args.drain_timeout),
    )
    report = pipeline.run()
    print(
        json.dumps(
            {
                "exit_code": report.exit_code,
                "state": report.state,
                "reason": report.reason,
                "records_in": report.records_in,
                "abandoned_rows": report.abandoned_rows,
                "committed": {str(k): v for k, v in report.committed.items()},
            }
        ),
        flush=True,
    )
    return report.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
