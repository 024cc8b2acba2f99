"""`make demo-collector`: the API → spool → dataset collector against local test servers.

Runs ``examples/api_to_dataset.py`` against two test servers on loopback, started in
this process: the API test server (``tests/support/api_server.py``, a "latest readings"
API whose answers repeat the previous ones) and a test server implementing the Hugging
Face Hub's documented commit API (``tests/support/hub.py``) — not the Hub. The example
polls every second and commits 10-second windows (instead of every minute and hourly);
once the API's sequence has ended and every reading is spooled the demo stops it with
SIGTERM, then prints the commits, each committed file with its row count, whether
every reading the API served is in the dataset exactly once, and the spool directory,
empty after the drain. Exit code 0 only when all of that holds.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.collector import REPO, parquet_rows, run_collector  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--readings", type=int, default=60, help="readings the API serves")
    parser.add_argument("--poll", default="1s", help="the source's interval")
    parser.add_argument("--window", default="10s", help="the dataset sink's window")
    args = parser.parse_args(argv)
    workdir = ROOT / ".demo" / "collector"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)

    run = run_collector(
        workdir,
        readings=args.readings,
        poll=args.poll,
        window=args.window,
        progress=lambda line: print(line, flush=True),
    )
    print(f"collector exited {run.exit_code} (log: {workdir.relative_to(ROOT)}/collector.log)")
    for summary in re.findall(r'msg="(pipeline \S+ completed[^"]*)"', run.log):
        print(f"  {summary}")
    print(f"\n{len(run.commits)} commits to {REPO}:")
    for commit in run.commits:
        print(f"  {commit.oid[:12]}  {commit.summary}  ({len(commit.files)} files)")

    print("\nfiles in the dataset:")
    committed: Counter[tuple[str, int]] = Counter()
    for path, data in sorted(run.files.items()):
        rows = parquet_rows(data)
        committed.update((str(r["station_id"]), int(str(r["timestamp"]))) for r in rows)
        print(f"  {path}  {len(rows)} row{'' if len(rows) == 1 else 's'}")
    twice = sorted(key for key, count in committed.items() if count > 1)
    missing = sorted(run.served - set(committed))
    once = not twice and not missing
    print(
        f"\n{len(run.served)} distinct readings served by the API test server, "
        f"{sum(committed.values())} rows committed: "
        + ("each reading exactly once" if once else f"{len(missing)} missing, {len(twice)} twice")
    )
    entries = ", ".join(run.spool_entries) or "empty"
    print(f"spool directory {run.spool.relative_to(ROOT)}: {entries}")
    ok = run.exit_code == 0 and once and not run.spool_entries
    if not ok:
        print(run.log[-3000:], file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
