"""`make demo-cdc`: PostgreSQL -> Debezium -> Kafka -> spate -> ClickHouse, compared.

Expects the local services running (``scripts/demo-cdc.sh`` starts ``kafka clickhouse
postgres connect`` with ``scripts/services.sh``). Then:

1. a fresh PostgreSQL database ``spate_demo_cdc`` with the example's table ``items``
   (``REPLICA IDENTITY FULL``), pre-filled;
2. Debezium's connector for it (JSON change events; it snapshots the table, then streams);
3. a seeded random workload on the table: inserts, updates, primary-key changes, deletes,
   a column added mid-stream, transactions of several statements;
4. ``spate run examples/postgres_cdc_to_clickhouse.yaml`` into a fresh ClickHouse database
   ``spate_demo_cdc``, until both of its tables equal the source table (or a timeout);
5. prints the source's row count and checksum and those of ``items FINAL`` and of
   ``items_signed`` collapsed by its sign; exit code 0 only when all three agree.

The connector is deleted and its replication slot dropped at the end.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.cdc import (  # noqa: E402
    Workload,
    cdc_endpoints,
    create_table,
    register,
)
from tests.support.cdc_target import Row, Target, checksum, source_rows  # noqa: E402

EXAMPLE = ROOT / "examples" / "postgres_cdc_to_clickhouse.yaml"
CHAIN = "examples.postgres_cdc_to_clickhouse:chains"
DATABASE = "spate_demo_cdc"
TABLE = "public.items"


def clickhouse_client(url: str) -> object:
    import clickhouse_connect

    host, port = url.removeprefix("http://").rsplit(":", 1)
    return clickhouse_connect.get_client(host=host, port=int(port))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1000, help="rows pre-filled (snapshot)")
    parser.add_argument("--changes", type=int, default=2000, help="workload statements")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds to catch up")
    args = parser.parse_args(argv)

    services = cdc_endpoints()
    postgres = services.postgres
    clickhouse_url = os.environ.get("CLICKHOUSE_URL") or os.environ["SPATE_CLICKHOUSE_URL"]

    postgres.drop_database(DATABASE)
    postgres.create_database(DATABASE)
    create_table(postgres, DATABASE, TABLE, replica_identity_full=True)
    postgres.sql(
        f"INSERT INTO {TABLE} SELECT i, 'name ' || i, i * 10, i % 2 = 0 "
        f"FROM generate_series(1, {args.rows}) i",
        DATABASE,
    )
    admin = clickhouse_client(clickhouse_url)
    admin.command(f"DROP DATABASE IF EXISTS {DATABASE}")  # type: ignore[attr-defined]
    admin.command(f"CREATE DATABASE {DATABASE}")  # type: ignore[attr-defined]
    target = Target(lambda: clickhouse_client(clickhouse_url), DATABASE)

    print(f"PostgreSQL: {DATABASE}.items, {args.rows} rows; registering Debezium's connector")
    capture = register(services, DATABASE, [TABLE], snapshot_mode="initial")
    topic = capture.topic(TABLE)
    log = Path(tempfile.mkdtemp(prefix="spate-demo-cdc-")) / "pipeline.log"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "KAFKA_BROKERS": services.bootstrap,
        "KAFKA_TOPIC": topic,
        "KAFKA_GROUP": f"{capture.name}-demo",
        "CLICKHOUSE_URL": clickhouse_url,
        "CLICKHOUSE_DATABASE": DATABASE,
        "PIPELINE_NAME": "items-cdc-demo",
    }
    spate = Path(sys.executable).parent / "spate"
    try:
        with log.open("ab") as out:
            proc = subprocess.Popen(
                [str(spate), "run", str(EXAMPLE), "--chain", CHAIN],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=ROOT,
            )
        print(f"spate run {EXAMPLE.relative_to(ROOT)} on {topic} (log: {log})")
        workload = Workload.generate(
            TABLE,
            seed=args.seed,
            operations=args.changes,
            existing=range(1, args.rows + 1),
            truncate=False,
        )
        workload.run(postgres, DATABASE)
        print(f"workload: {len(workload.transactions)} transactions committed")
        expected = source_rows(postgres, DATABASE, TABLE)
        deadline = time.monotonic() + args.timeout
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                if target.equal_to(expected):
                    break
            except Exception:  # the tables are not created yet
                pass
            time.sleep(0.5)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        code = proc.wait(120)
    finally:
        capture.close()

    sides = {
        "PostgreSQL items": expected,
        "ClickHouse items FINAL": target.replacing(),
        "ClickHouse items_signed (by sign)": target.collapsed(),
    }
    lines, same = verdict(sides, target.sign_range())
    print("\n".join(lines))
    if code != 0:
        print(f"spate exited {code}; see {log}")
    return 0 if same and code == 0 else 1


def verdict(sides: dict[str, list[Row]], signs: tuple[int, int]) -> tuple[list[str], bool]:
    """The lines that compare ``sides`` (the first is the source) and whether they agree:
    each side's row count and checksum, the raw sign sums' range, MATCH or MISMATCH."""
    lines = [
        f"{name:<36} {len(rows):>7} rows  checksum {checksum(rows)}" for name, rows in sides.items()
    ]
    low, high = signs
    lines.append(f"{'raw sum(_sign) per key':<36} {low}..{high}")
    expected = next(iter(sides.values()))
    # A deleted key's +1 and -1 rows may be gone altogether once a merge collapsed them.
    same = all(rows == expected for rows in sides.values()) and low >= 0 and high <= 1
    lines.append("MATCH" if same else "MISMATCH")
    return lines, same


if __name__ == "__main__":
    raise SystemExit(main())
