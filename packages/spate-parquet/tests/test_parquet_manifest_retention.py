"""B104: manifest versions are cleaned up after each publish, safely, on the real moto S3
server of ``scripts/services.sh`` (and locally); unpublished parts on S3 are adopted or
deleted at restart (B52).

* versions older than the newest ``keep_manifests`` are deleted after a publish, never
  the one the pointer names nor a newer one, never one within ``manifest_grace``; a reader
  polling throughout never sees a torn, missing or shrinking manifest, and two writers
  still never lose a part;
* a writer killed (SIGKILL) between publishing and cleaning up leaves only extra versions,
  which the next publish deletes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from spate.errors import ErrorClass, SinkError
from spate.records import Lane
from spate.sink.writebehind import CommitGates
from spate_parquet import LocalStore, ManifestStore, Part
from spate_parquet._manifest import VERSIONS

from .harness import Feeder, lake_store, make_sink

LANE = Lane("orders", 0)
ROOT = Path(__file__).resolve().parents[3]


def _versions(client: Any, name: str) -> list[int]:
    found = client.list_objects_v2(Bucket=name, Prefix=f"lake/t.parts/{VERSIONS}")
    return sorted(
        int(o["Key"].rsplit("/", 1)[1].removesuffix(".json")) for o in found.get("Contents", ())
    )


def _part(writer: int, n: int) -> Part:
    return Part(f"t.parts/w{writer}-{n}.parquet", 1, 10, f"s{writer}", 0, n, n, 0)


def test_b104_old_versions_go_while_two_writers_publish_and_a_reader_polls(
    lake: tuple[Any, str, str],
) -> None:
    client, name, _ = lake
    store = lake_store(lake)
    keep = 3
    writers = [
        ManifestStore(store, "t", CommitGates().gate(f"b104-{name}-{i}", 5.0), keep=keep, grace=0.0)
        for i in range(2)
    ]
    roller = ManifestStore(
        store, "t", CommitGates().gate(f"b104-{name}-r", 5.0), keep=keep, grace=0.0
    )
    per_writer = 12
    stop = threading.Event()
    problems: list[str] = []
    seen: list[int] = []

    def read() -> None:
        most = 0
        while not stop.is_set():
            try:
                data = client.get_object(Bucket=name, Key="lake/t.parts/_manifest.json")
            except client.exceptions.NoSuchKey:
                if most:
                    problems.append("the pointer went missing")
                continue
            body = json.loads(data["Body"].read())  # a torn object would not parse
            if len(body["parts"]) != body["version"]:
                problems.append(f"version {body['version']} lists {len(body['parts'])} parts")
            if body["version"] < most:
                problems.append(f"the pointer went back from {most} to {body['version']}")
            most = max(most, body["version"])
            seen.append(body["version"])
            # A writer's view: the pointer rolled forward over newer versions.
            latest = roller.latest()
            if latest.version < body["version"]:
                problems.append(f"latest() gave {latest.version} after the pointer showed {most}")

    def write(i: int) -> None:
        for n in range(per_writer):
            writers[i].publish(_part(i, n), "id: int64")

    reader = threading.Thread(target=read)
    reader.start()
    threads = [threading.Thread(target=write, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    reader.join()
    final = roller.latest()
    assert {p.path for p in final.parts} == {
        _part(i, n).path for i in range(2) for n in range(per_writer)
    }, "a part was lost"
    assert not problems, problems[:3]
    assert seen, "the reader never saw a manifest"
    total = 2 * per_writer
    assert final.version == total
    assert _versions(client, name) == list(range(total - keep + 1, total + 1))
    store.close()


@pytest.mark.parametrize("where", ["local", pytest.param("s3", marks=pytest.mark.integration)])
def test_b104_versions_within_the_grace_period_are_kept(
    where: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if where == "s3":
        lake = request.getfixturevalue("lake")
        store: Any = lake_store(lake)

        def versions() -> list[int]:
            return _versions(lake[0], lake[1])
    else:
        store = LocalStore(str(tmp_path))

        def versions() -> list[int]:
            return sorted(int(p.stem) for p in (tmp_path / "t.parts" / VERSIONS).glob("*.json"))

    gate = CommitGates().gate(f"b104-grace-{uuid.uuid4().hex}", 5.0)
    young = ManifestStore(store, "t", gate, keep=1, grace=3600.0)
    for n in range(4):
        young.publish(_part(0, n), "id: int64")
    assert versions() == [1, 2, 3, 4], "a version within the grace period was deleted"
    old = ManifestStore(store, "t", gate, keep=1, grace=0.0)
    assert old.clean() == [1, 2, 3]
    assert versions() == [4]
    assert len(old.latest().parts) == 4
    store.close()


_KILLED_WRITER = """
import os, signal, sys
from spate.config import decode
from spate.sink.writebehind import CommitGates
from spate_parquet import ManifestStore, ParquetSinkConfig, Part, S3Store

bucket, endpoint = sys.argv[1], sys.argv[2]
config = decode(
    ParquetSinkConfig, {"path": f"s3://{bucket}/lake", "s3": {"endpoint_url": endpoint}}, "p"
)
gate = CommitGates().gate("killed", 5.0)
manifests = ManifestStore(S3Store(config), "t", gate, keep=2, grace=0.0)
manifests.clean = lambda: os.kill(os.getpid(), signal.SIGKILL)  # dies before cleaning
manifests.publish(Part("t.parts/w0-5.parquet", 1, 10, "s0", 0, 5, 5, 0), "id: int64")
"""


def test_b104_a_writer_killed_before_its_clean_up_leaves_only_extra_versions(
    lake: tuple[Any, str, str],
) -> None:
    client, name, endpoint = lake
    store = lake_store(lake)
    gate = CommitGates().gate(f"b104-kill-{name}", 5.0)
    everything = ManifestStore(store, "t", gate, keep=0)  # keeps every version
    for n in range(5):
        everything.publish(_part(0, n), "id: int64")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", _KILLED_WRITER, name, endpoint],
        env=env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == -9, done.stderr.decode()[-2000:]
    assert _versions(client, name) == [1, 2, 3, 4, 5, 6], "published, nothing cleaned"
    pointer = json.loads(
        client.get_object(Bucket=name, Key="lake/t.parts/_manifest.json")["Body"].read()
    )
    assert pointer["version"] == 6 and len(pointer["parts"]) == 6
    nxt = ManifestStore(store, "t", gate, keep=2, grace=0.0)
    nxt.publish(_part(0, 6), "id: int64")
    assert _versions(client, name) == [6, 7]
    assert [p.path for p in nxt.latest().parts] == [_part(0, n).path for n in range(7)]
    store.close()


@pytest.mark.parametrize("orphans", ["keep", "delete"])
def test_b52_a_part_written_but_never_published_on_s3_is_adopted_or_deleted_at_restart(
    lake: tuple[Any, str, str], orphans: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    client, name, endpoint = lake
    body = {
        "path": f"s3://{name}/lake",
        "s3": {"endpoint_url": endpoint},
        "publish": "manifest",
        "table": "t",
        "max_records": 5,
        "retry": {"max_attempts": 1},
        "orphans": orphans,
    }
    rows = [{"id": i} for i in range(5)]

    def crash(self: ManifestStore, part: Part, schema: str) -> None:
        raise SinkError("the process died before publishing", ErrorClass.FATAL)

    with monkeypatch.context() as patch:
        patch.setattr(ManifestStore, "publish", crash)
        sink = make_sink(body)
        Feeder(sink).batch(LANE, 0, rows)
        sink.flush(float("inf"))
        sink.close()

    def keys() -> list[str]:
        found = client.list_objects_v2(Bucket=name, Prefix="lake/")
        return sorted(o["Key"].removeprefix("lake/") for o in found.get("Contents", ()))

    (orphan,) = keys()
    assert orphan.startswith("t.parts/") and orphan.endswith(".parquet")
    sink = make_sink(body)  # the restart
    assert (orphan in keys()) is (orphans == "keep")
    feeder = Feeder(sink)
    token = feeder.batch(LANE, 0, rows)  # the source replays the uncommitted batch
    assert sink.flush(float("inf"))
    sink.close()
    assert feeder.committed(LANE) == 5, token.status
    manifest = json.loads(
        client.get_object(Bucket=name, Key="lake/t.parts/_manifest.json")["Body"].read()
    )
    assert [p["path"] for p in manifest["parts"]] == [orphan], "rewritten and published"
    assert manifest["total_rows"] == 5
