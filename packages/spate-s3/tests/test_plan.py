"""Deterministic split planning (B25): same listing, same split ids; a changed object
changes only its own split."""

from __future__ import annotations

import pytest
from spate_coordination import SplitSpec
from spate_s3 import PACKING_VERSION, Location, ObjectInfo, SplitObjects, plan_splits
from spate_s3._plan import to_specs

LOC = Location("s3", "bucket", "events/")


def listing(n: int, size: int = 100) -> list[ObjectInfo]:
    return [ObjectInfo(f"events/{i:04d}.ndjson", f'"etag-{i}"', size) for i in range(n)]


def test_b25_replanning_an_unchanged_listing_gives_identical_splits() -> None:
    objects = listing(50)
    first = to_specs(plan_splits(LOC, objects, 1000))
    # The store may list in any order; the plan depends only on the objects.
    again = to_specs(plan_splits(LOC, list(reversed(objects)), 1000))
    assert first == again
    assert [s.encode() for s in first] == [s.encode() for s in again]
    assert len({s.split_id for s in first}) == len(first) == 5


def test_b25_a_changed_etag_changes_only_the_split_holding_it() -> None:
    objects = listing(50)
    before = [s.split_id for s in plan_splits(LOC, objects, 1000)]
    objects[23] = ObjectInfo(objects[23].key, '"rewritten"', objects[23].size)
    after = [s.split_id for s in plan_splits(LOC, objects, 1000)]
    changed = [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b]
    assert changed == [2]


def test_packing_keeps_key_order_targets_the_size_and_never_cuts_an_object() -> None:
    objects = [
        ObjectInfo("a", '"1"', 400),
        ObjectInfo("b", '"2"', 400),
        ObjectInfo("c", '"3"', 5000),  # larger than the target: a split of its own
        ObjectInfo("d", '"4"', 0),
        ObjectInfo("e", '"5"', 700),
    ]
    splits = plan_splits(LOC, objects, 1000)
    assert [[o.key for o in s.objects] for s in splits] == [["a", "b"], ["c"], ["d", "e"]]


def test_listing_the_same_key_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="listed twice"):
        plan_splits(LOC, [ObjectInfo("a", '"1"', 1), ObjectInfo("a", '"2"', 1)], 10)


def test_split_metadata_round_trips_through_the_coordination_spec() -> None:
    (split,) = plan_splits(LOC, listing(3), 10_000)
    (spec,) = to_specs([split])
    decoded = SplitObjects.from_spec(SplitSpec.decode(spec.split_id, spec.encode()))
    assert decoded.objects == split.objects
    assert decoded.location.bucket == "bucket"
    assert spec.split_id.startswith("s-")


def test_a_split_planned_by_another_packing_version_is_refused_clearly() -> None:
    spec = SplitSpec("s-x", 1.0, {"v": PACKING_VERSION + 1, "objects": []})
    with pytest.raises(ValueError, match="packing version"):
        SplitObjects.from_spec(spec)
