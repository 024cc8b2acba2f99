"""Deterministic packing of listed objects into splits, and the split metadata format.

Owns :func:`plan_splits`: objects sorted by key are packed greedily, in order, into
splits of about ``target_bytes`` (an object is never cut; one larger than the target is
a split of its own). A split's id is a hash of the packing version and, for each of its
objects, the key, ETag and size — so listing an unchanged prefix again yields the same
ids and metadata, and publishing that plan again is a no-op (B25); a changed object
changes its split's id. Bumping :data:`PACKING_VERSION` is how a change to the packing
rules keeps old plans from being mistaken for new ones.

Also owns the metadata carried by each :class:`~spate_coordination.SplitSpec`
(:class:`SplitObjects`): the location and the pinned objects, everything a worker needs
to read the split without listing. Does not own listing or reading.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from spate_coordination import SplitSpec

from spate_s3._objects import ObjectInfo
from spate_s3.config import Location

PACKING_VERSION = 1
"""Part of every split id; bump it when the packing rules change."""

_MIB = 1024.0 * 1024.0


@dataclass(frozen=True, slots=True)
class SplitObjects:
    """What one split reads: its location and its objects, in order."""

    split_id: str
    location: Location
    objects: tuple[ObjectInfo, ...]

    @property
    def total_bytes(self) -> int:
        return sum(o.size for o in self.objects)

    def meta(self) -> dict[str, Any]:
        return {
            "v": PACKING_VERSION,
            "scheme": self.location.scheme,
            "bucket": self.location.bucket,
            "objects": [[o.key, o.etag, o.size] for o in self.objects],
        }

    @classmethod
    def from_spec(cls, spec: SplitSpec) -> SplitObjects:
        """Decode a published split; ``ValueError`` for metadata this version cannot read."""
        meta: Mapping[str, object] = spec.meta
        if meta.get("v") != PACKING_VERSION:
            raise ValueError(
                f"split {spec.split_id} was planned by packing version {meta.get('v')!r}; "
                f"this spate-s3 reads version {PACKING_VERSION}"
            )
        scheme, bucket, raw = meta.get("scheme"), meta.get("bucket"), meta.get("objects")
        if scheme not in ("s3", "file") or not isinstance(bucket, str) or not isinstance(raw, list):
            raise ValueError(f"split {spec.split_id} has malformed metadata")
        objects: list[ObjectInfo] = []
        for item in raw:
            if (
                not isinstance(item, list)
                or len(item) != 3
                or not isinstance(item[0], str)
                or not isinstance(item[1], str)
                or not isinstance(item[2], int)
            ):
                raise ValueError(f"split {spec.split_id} has a malformed object entry {item!r}")
            objects.append(ObjectInfo(item[0], item[1], item[2]))
        location = Location("s3" if scheme == "s3" else "file", bucket, "")
        return cls(spec.split_id, location, tuple(objects))


def split_id(objects: Iterable[ObjectInfo]) -> str:
    """``s-`` and 20 hex digits of a hash over the packing version and each object's
    key, ETag and size. Stable across processes and machines (B25)."""
    digest = hashlib.sha256(f"spate-s3 packing v{PACKING_VERSION}\n".encode())
    for obj in objects:
        digest.update(obj.key.encode())
        digest.update(b"\0")
        digest.update(obj.etag.encode())
        digest.update(b"\0")
        digest.update(str(obj.size).encode())
        digest.update(b"\n")
    return "s-" + digest.hexdigest()[:20]


def pack(objects: Iterable[ObjectInfo], target_bytes: int) -> list[list[ObjectInfo]]:
    """Greedy, order-preserving packing by key (see the module docstring)."""
    if target_bytes < 1:
        raise ValueError("target_bytes must be positive")
    groups: list[list[ObjectInfo]] = []
    current: list[ObjectInfo] = []
    size = 0
    seen: set[str] = set()
    for obj in sorted(objects, key=lambda o: o.key):
        if obj.key in seen:
            raise ValueError(f"object {obj.key!r} listed twice")
        seen.add(obj.key)
        if current and size + obj.size > target_bytes:
            groups.append(current)
            current, size = [], 0
        current.append(obj)
        size += obj.size
    if current:
        groups.append(current)
    return groups


def plan_splits(
    location: Location, objects: Iterable[ObjectInfo], target_bytes: int
) -> list[SplitObjects]:
    """The splits for ``objects`` under ``location``; the same input gives the same plan."""
    return [
        SplitObjects(split_id(group), location, tuple(group))
        for group in pack(objects, target_bytes)
    ]


def to_specs(splits: Iterable[SplitObjects]) -> list[SplitSpec]:
    """Coordination specs: weight is the split's size in MiB (at least a tiny positive
    number, so empty objects still count as work)."""
    return [SplitSpec(s.split_id, max(s.total_bytes / _MIB, 1e-6), s.meta()) for s in splits]
