"""Manifest mode: parts listed in ``{table}.parts/_manifest.json``, replaced atomically.

Layout under the sink's root::

    events.parts/
      _manifest.json                    what readers read: the latest published version
      _manifests/00000000000000000007.json   every version, immutable once written
      dt=2026-12-01/part-orders-0-…-….parquet

A version is never edited. Publishing version ``n + 1`` is a compare-and-set: the
writer rolls forward from the pointer to the newest existing version ``n``, builds
``n + 1`` from it with its part appended, and *creates* ``_manifests/{n+1}.json`` only
if nobody has (``link`` locally, ``If-None-Match: *`` on S3). A writer that loses the
race reads the winner's version and tries ``n + 2``; so concurrent writers — threads,
processes, hosts — never lose a part. The pointer ``_manifest.json`` is then rewritten
whole (local: temp + fsync + rename; S3: one PUT, which readers never see half-written),
and only forwards: it is replaced conditionally on the version it showed (S3
``If-Match`` on its ETag, ``If-None-Match: *`` for the first), and a writer whose
version is older than the pointer's leaves it.

A publish returns only once the pointer names a version that lists the part (B128). A
writer whose earlier attempt created the version and then failed on the pointer (a 503,
a timeout), or whose create landed but was answered as taken (a retried conditional
PUT), finds its part listed in the newest version and moves the pointer there before it
returns, so an acknowledged part is never left in a version no pointer reaches.

A part written but not yet in a version is invisible to readers; a restart either
rewrites it byte-identically (and publishes it) or, with ``orphans: delete``, deletes it.

Retention (``keep_manifests``, B104): after a successful publish the writer deletes the
versions older than the newest ``keep`` — never the one the pointer names nor any newer
one (a writer rolls forward from the pointer), and never one written within ``grace``
seconds (a reader may still be reading it). A writer that stops between publishing and
the clean-up leaves only extra versions, which the next publish deletes. Deleting frees
version numbers below the pointer; a writer stalled long enough to have missed them
could create one again, so after creating a version the writer checks the pointer: one
already at or past that number without its part means the version was stale, so it is
deleted and the part published on top of the latest version.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from spate.errors import ErrorClass, SinkError
from spate.sink.writebehind import CommitGate

from spate_parquet._store import Store

logger = logging.getLogger(__name__)

POINTER = "_manifest.json"
VERSIONS = "_manifests/"


def _version_key(version: int) -> str:
    return f"{VERSIONS}{version:020d}.json"


@dataclass(frozen=True, slots=True)
class Part:
    """One published part: where it is, what it holds and which source positions."""

    path: str
    rows: int
    bytes: int
    stream: str
    partition: int
    first: int
    last: int
    schema: int
    """Index into :attr:`Manifest.schemas`."""

    def as_json(self) -> dict[str, object]:
        return {
            "path": self.path,
            "rows": self.rows,
            "bytes": self.bytes,
            "source": {
                "stream": self.stream,
                "partition": self.partition,
                "first": self.first,
                "last": self.last,
            },
            "schema": self.schema,
        }

    @staticmethod
    def of(raw: Mapping[str, Any]) -> Part:
        source = raw["source"]
        return Part(
            str(raw["path"]),
            int(raw["rows"]),
            int(raw["bytes"]),
            str(source["stream"]),
            int(source["partition"]),
            int(source["first"]),
            int(source["last"]),
            int(raw["schema"]),
        )


@dataclass(frozen=True, slots=True)
class Manifest:
    """One version of a table's manifest."""

    table: str
    version: int = 0
    parts: tuple[Part, ...] = ()
    schemas: tuple[str, ...] = ()
    """Every schema parts were written with (Arrow's text form), in order of appearance."""
    updated: str = ""
    paths: frozenset[str] = field(default=frozenset(), compare=False)

    @property
    def total_rows(self) -> int:
        return sum(p.rows for p in self.parts)

    def with_part(self, part: Part, schema: str, now: float) -> Manifest:
        """The next version: this one plus ``part`` (a no-op for a part already listed)."""
        schemas = self.schemas if schema in self.schemas else (*self.schemas, schema)
        part = Part(
            part.path,
            part.rows,
            part.bytes,
            part.stream,
            part.partition,
            part.first,
            part.last,
            schemas.index(schema),
        )
        stamp = dt.datetime.fromtimestamp(now, dt.UTC).isoformat(timespec="milliseconds")
        return Manifest(
            self.table,
            self.version + 1,
            (*self.parts, part),
            schemas,
            stamp,
            self.paths | {part.path},
        )

    def to_bytes(self) -> bytes:
        body = {
            "format": 1,
            "table": self.table,
            "strategy": "append",
            "version": self.version,
            "updated": self.updated,
            "total_rows": self.total_rows,
            "schemas": list(self.schemas),
            "parts": [p.as_json() for p in self.parts],
        }
        return json.dumps(body, indent=1).encode() + b"\n"

    @staticmethod
    def from_bytes(data: bytes) -> Manifest:
        raw = json.loads(data)
        parts = tuple(Part.of(p) for p in raw["parts"])
        return Manifest(
            str(raw["table"]),
            int(raw["version"]),
            parts,
            tuple(str(s) for s in raw["schemas"]),
            str(raw.get("updated", "")),
            frozenset(p.path for p in parts),
        )


class ManifestStore:
    """Reads and publishes the manifest of one table under a :class:`Store`."""

    def __init__(
        self,
        store: Store,
        table: str,
        gate: CommitGate | None,
        clock: Callable[[], float] = time.time,
        *,
        keep: int = 0,
        grace: float = 300.0,
    ) -> None:
        """``keep``: versions kept by the clean-up after each publish (0: every version);
        ``grace``: seconds a version is kept at least, whatever ``keep`` says."""
        self._store = store
        self.table = table
        self.prefix = f"{table}.parts/"
        self._gate = gate
        self._clock = clock
        self._keep = keep
        self._grace = grace
        self.versions_deleted = 0

    def _read(self, key: str) -> Manifest | None:
        data = self._store.get(self.prefix + key)
        if data is None:
            return None
        try:
            return Manifest.from_bytes(data)
        except (ValueError, KeyError, TypeError) as exc:
            raise SinkError(
                f"{self._store.endpoint}/{self.prefix}{key} is not a manifest: {exc}",
                ErrorClass.FATAL,
            ) from exc

    def latest(self) -> Manifest:
        """The newest version: from the pointer, rolled forward over newer versions."""
        current = self._read(POINTER) or Manifest(self.table)
        while True:
            newer = self._read(_version_key(current.version + 1))
            if newer is None:
                return current
            current = newer

    def publish(self, part: Part, schema: str) -> Manifest:
        """Add ``part`` in a new version (through the gate, if this store has one; the
        sink's write-behind engine runs it under its own) and return that version."""
        if self._gate is None:
            return self._publish_and_clean(part, schema)
        return self._gate.run(lambda: self._publish_and_clean(part, schema))

    def _publish_and_clean(self, part: Part, schema: str) -> Manifest:
        published = self._publish(part, schema)
        if self._keep > 0:
            try:
                self.clean()
            except SinkError as exc:  # the part is published; the next clean-up retries
                logger.warning("manifest %s%s: clean-up failed: %s", self.prefix, VERSIONS, exc)
        return published

    def _publish(self, part: Part, schema: str) -> Manifest:
        current = self.latest()
        while True:
            if part.path in current.paths:
                # Listed already: an earlier attempt created the version and then failed
                # on the pointer, or a create that landed was retried and refused. The
                # part is acknowledged once this returns, so the pointer must show it
                # (B128): move it to the newest version, which lists the part.
                self._advance_pointer(current)
                return current
            candidate = current.with_part(part, schema, self._clock())
            key = self.prefix + _version_key(candidate.version)
            if not self._store.create(key, candidate.to_bytes()):
                # Another writer took this version: build on theirs.
                current = self._read(_version_key(candidate.version)) or current
                continue
            if self._stale(candidate, part):
                self._store.delete(key)
                current = self.latest()
                continue
            break
        self._advance_pointer(candidate)
        return candidate

    def _stale(self, candidate: Manifest, part: Part) -> bool:
        """Whether ``candidate`` reused a number the clean-up had freed: the pointer is
        already at or past it and (so not built on it) does not list ``part``."""
        pointer = self._read(POINTER)
        if pointer is None or pointer.version < candidate.version or part.path in pointer.paths:
            return False
        logger.warning(
            "manifest %s: version %d was deleted by a clean-up while this writer built it; "
            "publishing on the latest version instead",
            self.prefix,
            candidate.version,
        )
        return True

    def clean(self) -> list[int]:
        """Delete the versions the retention lets go; return their numbers.

        Kept: the newest ``keep`` versions, the pointer's and every newer one, and every
        version written less than ``grace`` seconds ago.
        """
        pointer = self._read(POINTER)
        if pointer is None or self._keep <= 0:
            return []
        versions: list[tuple[int, str, float]] = []
        for key, written in self._store.list_dated(self.prefix + VERSIONS):
            name = key.rsplit("/", 1)[-1].removesuffix(".json")
            if name.isdigit():
                versions.append((int(name), key, written))
        versions.sort()
        newest = versions[-1][0] if versions else 0
        cutoff = self._clock() - self._grace
        deleted = []
        for version, key, written in versions:
            if version >= pointer.version or version > newest - self._keep or written > cutoff:
                continue
            self._store.delete(key)
            deleted.append(version)
        self.versions_deleted += len(deleted)
        if deleted:
            logger.debug("manifest %s: deleted versions %s", self.prefix, deleted)
        return deleted

    def _advance_pointer(self, manifest: Manifest) -> None:
        """Point ``_manifest.json`` at ``manifest`` unless it already shows a newer version.

        A conditional write on the pointer's current version, so two writers can never
        move it backwards (S3 ``If-Match``; a local directory checks and renames under
        one file lock).
        """
        key = self.prefix + POINTER
        while True:
            found = self._store.get_tagged(key)
            tag = None
            if found is not None:
                data, tag = found
                if Manifest.from_bytes(data).version >= manifest.version:
                    return
            if self._store.replace(key, manifest.to_bytes(), tag):
                return

    def orphans(self, manifest: Manifest) -> list[str]:
        """Parts under the table that no version lists (written, never published)."""
        return [
            key
            for key in self._store.list(self.prefix)
            if key.endswith(".parquet") and key not in manifest.paths
        ]
