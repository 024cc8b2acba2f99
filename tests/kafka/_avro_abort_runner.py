"""Runs a columnar Avro pipeline from a configuration file; prints the deserializer's
counters as JSON when it ends (B98 end to end; the process may abort instead).

Usage: ``python -m tests.kafka._avro_abort_runner <config>``.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def chains(ctx: Any) -> Any:
    return ctx.frames().select("id", "s")


def main(path: str) -> int:
    from spate import Pipeline, load_config

    pipeline = Pipeline.from_config(load_config(path), handle_signals=False).chains(chains)
    report = pipeline.run()
    counts: dict[str, float] = {}
    for metric in pipeline.meter.registry.collect():
        if metric.name.startswith("spate_deser_records"):
            for sample in metric.samples:
                if sample.name.endswith("_total"):
                    counts[sample.labels["outcome"]] = sample.value
    print(json.dumps({"exit_code": report.exit_code, "deser": counts}), flush=True)
    return report.exit_code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
