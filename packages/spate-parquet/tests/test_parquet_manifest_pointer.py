"""B128: a publish returns only once ``_manifest.json`` names a version that lists the
part, also when an earlier attempt created the version and then failed before the
pointer moved — locally and on the real moto S3 server of ``scripts/services.sh``.

The faults are injected between the version's create and the pointer's update:

* the pointer's conditional PUT fails (an S3 503, a timeout) and the writer retries the
  publish;
* the version's conditional create lands but its answer is lost, and the retried create
  is refused as taken (botocore retrying an ``If-None-Match: *`` PUT that had landed).
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from spate.errors import ErrorClass, SinkError
from spate.records import Lane
from spate.sink.writebehind import CommitGates
from spate_parquet import LocalStore, ManifestStore, Part, S3Store
from spate_parquet._manifest import POINTER

from .harness import Feeder, lake_store, make_sink

LANE = Lane("orders", 0)
PLACES = ["local", pytest.param("s3", marks=pytest.mark.integration)]


def _part(n: int) -> Part:
    return Part(f"t.parts/p-{n}.parquet", 1, 10, "orders", 0, n, n, 0)


@pytest.fixture(params=PLACES)
def place(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[LocalStore | S3Store, str, dict[str, Any]]]:
    """(a store, where it is, the sink config keys that point a sink there)."""
    if request.param == "local":
        yield LocalStore(str(tmp_path)), "local", {"path": str(tmp_path)}
        return
    lake = request.getfixturevalue("lake")
    store = lake_store(lake)
    yield store, "s3", {"path": f"s3://{lake[1]}/lake", "s3": {"endpoint_url": lake[2]}}
    store.close()


def _pointer(store: LocalStore | S3Store, table: str = "t") -> dict[str, Any] | None:
    data = store.get(f"{table}.parts/{POINTER}")
    return None if data is None else dict(json.loads(data))


def _fail_pointer_once(patch: pytest.MonkeyPatch, kind: type[LocalStore | S3Store]) -> list[str]:
    """Make the next conditional write of a pointer fail before it lands (as a 503 does)."""
    original = kind.replace
    failed: list[str] = []

    def replace(self: Any, key: str, data: bytes, tag: str | None) -> bool:
        if key.endswith(POINTER) and not failed:
            failed.append(key)
            raise SinkError(f"PUT (conditional) {key}: 503 SlowDown", ErrorClass.RETRYABLE)
        return original(self, key, data, tag)

    patch.setattr(kind, "replace", replace)
    return failed


def test_b128_a_publish_retried_after_the_pointer_failed_moves_the_pointer(
    place: tuple[LocalStore | S3Store, str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, _, _ = place
    manifests = ManifestStore(store, "t", CommitGates().gate(f"b128-{uuid.uuid4().hex}", 5.0))
    manifests.publish(_part(0), "id: int64")
    failed = _fail_pointer_once(monkeypatch, type(store))
    with pytest.raises(SinkError, match="503"):
        manifests.publish(_part(1), "id: int64")
    assert failed, "the fault was not injected"
    pointer = _pointer(store)
    assert pointer is not None and pointer["version"] == 1, "version 2 exists, unnamed"
    assert manifests.latest().version == 2
    published = manifests.publish(_part(1), "id: int64")  # the writer's retry
    assert published.version == 2
    pointer = _pointer(store)
    assert pointer is not None
    assert [p["path"] for p in pointer["parts"]] == [_part(0).path, _part(1).path], (
        "the retried publish returned without moving the pointer"
    )


def test_b128_a_create_that_landed_but_answered_taken_still_moves_the_pointer(
    place: tuple[LocalStore | S3Store, str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, _, _ = place
    kind = type(store)
    original = kind.create

    def create(self: Any, key: str, data: bytes) -> bool:
        # The first attempt lands, its answer is lost; the retry finds the key taken.
        assert original(self, key, data)
        return False

    manifests = ManifestStore(store, "t", CommitGates().gate(f"b128-{uuid.uuid4().hex}", 5.0))
    with monkeypatch.context() as patch:
        patch.setattr(kind, "create", create)
        published = manifests.publish(_part(0), "id: int64")
    assert published.version == 1
    pointer = _pointer(store)
    assert pointer is not None, "the version is listed nowhere readers look"
    assert [p["path"] for p in pointer["parts"]] == [_part(0).path]


def test_b128_a_sink_whose_pointer_update_failed_once_acks_only_a_visible_part(
    place: tuple[LocalStore | S3Store, str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The end of a backfill: the last part's pointer update fails once, the writer
    retries, the acks resolve — and a reader following the pointer sees every row."""
    store, _, where = place
    body = {
        **where,
        "publish": "manifest",
        "table": f"b128{uuid.uuid4().hex[:6]}",
        "max_records": 5,
        "retry": {"initial": "10ms", "max": "50ms"},
    }
    failed = _fail_pointer_once(monkeypatch, type(store))
    sink = make_sink(body)
    feeder = Feeder(sink)
    feeder.batch(LANE, 0, [{"id": i} for i in range(5)])
    assert sink.flush(float("inf"))
    sink.close()
    assert failed, "the fault was not injected"
    assert feeder.committed(LANE) == 5
    pointer = _pointer(store, body["table"])
    assert pointer is not None, "acknowledged, but no pointer names the part"
    assert pointer["total_rows"] == 5


class _PausedPut(LocalStore):
    """A local store whose first ``put`` of the pointer waits, after its check passed,
    until the test lets it go (a writer descheduled between the check and the rename)."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.checked = threading.Event()
        self.go_on = threading.Event()
        self._paused = False

    def put(self, key: str, data: bytes) -> None:
        if key.endswith(POINTER) and not self._paused:
            self._paused = True
            self.checked.set()
            self.go_on.wait(30)  # a hang-detector bound, not a timing claim
        super().put(key, data)


def test_b52_a_local_pointer_replace_is_one_compare_and_set(tmp_path: Path) -> None:
    """Two writers hold the pointer's tag; the first passed its check and is paused
    before its rename. The second's replace with the same tag must not also succeed:
    then the first's rename would move the pointer back to the older content."""
    store = _PausedPut(str(tmp_path))
    key = "t.parts/" + POINTER
    assert store.create(key, b"v1")
    found = store.get_tagged(key)
    assert found is not None
    tag = found[1]
    outcome: dict[str, bool] = {}
    first = threading.Thread(target=lambda: outcome.update(first=store.replace(key, b"v2", tag)))
    first.start()
    assert store.checked.wait(30)
    second = threading.Thread(target=lambda: outcome.update(second=store.replace(key, b"v3", tag)))
    second.start()
    second.join(1.0)  # unlocked, it finishes now; locked, it waits for the first
    store.go_on.set()
    first.join(30)
    second.join(30)
    assert not first.is_alive() and not second.is_alive()
    assert outcome == {"first": True, "second": False}
    assert store.get(key) == b"v2"
