"""An S3 backfill split across N instances, coordinated through NATS JetStream KV.

    NATS_URL=nats://127.0.0.1:4222 S3_URL=s3://my-bucket/events/ \\
        python examples/nats_coordinated_backfill.py --instances 3

starts three instances of the pipeline in ``nats_coordinated_backfill.yaml`` as child
processes of this one and waits for them. The instances share the work: one leads, lists
the prefix and packs the objects into splits; every split is read by one instance at a
time and its progress is committed to NATS behind the written records. Kill one of them
(``kill -9``) and the others take its splits over once its lease expires; stop them all
and start again, and the job resumes from the committed progress. The job ends when
every split is done: each instance exits 0.

On several machines, run one instance per machine instead, with the same ``JOB`` and a
unique ``INSTANCE_ID``:

    INSTANCE_ID=worker-a python examples/nats_coordinated_backfill.py --worker

``--seed N`` uploads N demo objects first (for MinIO or moto; see s3_backfill.py).
Needs ``pip install "spate[s3,json,coordination-nats]"``.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from spate import Pipeline, load_config

HERE = Path(__file__).resolve().parent
CONFIG = HERE / "nats_coordinated_backfill.yaml"


def chains(ctx: Any) -> Any:
    return ctx.chain().map(lambda ev: {"order": ev["order"], "cents": ev["cents"]}).sink()


def run_worker(config_path: str) -> int:
    """Run one instance in this process until the job is complete (or it fails)."""
    instance = os.environ.setdefault("INSTANCE_ID", f"{socket.gethostname()}-{os.getpid()}")
    logging.basicConfig(level=logging.INFO, format=f"{instance} %(levelname)s %(name)s %(message)s")
    report = Pipeline.from_config(load_config(config_path)).chains(chains).run()
    print(f"{instance}: {report.state}, {report.records_in} records read")
    return report.exit_code


def run_instances(config_path: str, count: int) -> int:
    """Start ``count`` instances as child processes and wait for all of them."""
    children = []
    for i in range(count):
        env = {**os.environ, "INSTANCE_ID": f"{socket.gethostname()}-{i}"}
        cmd = [sys.executable, __file__, "--worker", "--config", config_path]
        children.append(subprocess.Popen(cmd, env=env))
    codes = [child.wait() for child in children]
    print(f"instances exited with {codes}")
    return max(codes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(CONFIG), help="pipeline YAML")
    parser.add_argument("--instances", type=int, default=3, help="instances to start")
    parser.add_argument("--worker", action="store_true", help="run one instance here")
    parser.add_argument("--seed", type=int, default=0, help="upload N demo objects first")
    args = parser.parse_args(argv)
    if args.seed:
        sys.path.insert(0, str(HERE))
        from s3_backfill import seed

        url = os.environ.get("S3_URL", "s3://spate-demo/events/")
        count = seed(url, os.environ.get("S3_ENDPOINT_URL"), args.seed)
        print(f"seeded {args.seed} objects ({count} records) under {url}")
    if args.worker:
        return run_worker(args.config)
    return run_instances(args.config, args.instances)


if __name__ == "__main__":
    raise SystemExit(main())
