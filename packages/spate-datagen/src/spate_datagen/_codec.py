"""Encode datagen events as raw Avro, Confluent-framed Avro or JSON.

Avro ``raw`` framing of storefront events is what the flagship reads: the zig-zag varint
index of the union branch, then the branch record — no magic byte, no schema id. The
union's branch order is the order of :data:`KINDS`. A wide event is a single record
(``wide.avsc``), so its raw Avro is the record alone. ``confluent`` framing is the
Confluent wire format of the same datum: magic byte ``0``, the schema id as four
big-endian bytes, then the raw Avro. JSON events are one object each; a storefront
event's carries a ``kind`` field, a wide event's is its record alone.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from functools import cache
from importlib import resources
from typing import Any, Literal

import fastavro

from spate_datagen._events import KINDS, StorefrontEvent
from spate_datagen._wide import WIDE_KIND

Format = Literal["avro", "json", "confluent"]
FORMATS: tuple[Format, ...] = ("avro", "json", "confluent")


@cache
def storefront_schema_text() -> str:
    """The writer schema of the storefront union, as JSON text."""
    return resources.files("spate_datagen").joinpath("storefront.avsc").read_text()


@cache
def wide_schema_text() -> str:
    """The writer schema of wide events (``spate.datagen.WideEvent``), as JSON text."""
    return resources.files("spate_datagen").joinpath("wide.avsc").read_text()


@cache
def _parsed_branches() -> tuple[Any, ...]:
    parsed = fastavro.parse_schema(json.loads(storefront_schema_text()))
    return tuple(parsed)


@cache
def _parsed_wide() -> Any:
    return fastavro.parse_schema(json.loads(wide_schema_text()))


def _zigzag_varint(value: int) -> bytes:
    encoded = (value << 1) ^ (value >> 63)
    out = bytearray()
    while encoded & ~0x7F:
        out.append((encoded & 0x7F) | 0x80)
        encoded >>= 7
    out.append(encoded)
    return bytes(out)


_BRANCH_PREFIX = {kind: _zigzag_varint(i) for i, kind in enumerate(KINDS)}
_BRANCH_INDEX = {kind: i for i, kind in enumerate(KINDS)}


def _write_avro(buf: io.BytesIO, event: StorefrontEvent) -> None:
    if event.kind == WIDE_KIND:
        fastavro.schemaless_writer(buf, _parsed_wide(), event.record)
        return
    buf.write(_BRANCH_PREFIX[event.kind])
    fastavro.schemaless_writer(buf, _parsed_branches()[_BRANCH_INDEX[event.kind]], event.record)


def encode_avro(event: StorefrontEvent) -> bytes:
    """Raw Avro: of the union (branch index, then the record), or of a wide record."""
    buf = io.BytesIO()
    _write_avro(buf, event)
    return buf.getvalue()


def encode_confluent_avro(event: StorefrontEvent, schema_id: int = 1) -> bytes:
    """Confluent wire format: magic byte 0, ``schema_id`` (4 bytes, big-endian), raw Avro."""
    buf = io.BytesIO()
    buf.write(b"\x00" + schema_id.to_bytes(4, "big"))
    _write_avro(buf, event)
    return buf.getvalue()


def encode_json(event: StorefrontEvent) -> bytes:
    """One JSON object: a storefront event's with a ``kind`` field, a wide event's record."""
    record = event.record if event.kind == WIDE_KIND else {"kind": event.kind, **event.record}
    return json.dumps(record, separators=(",", ":")).encode()


def encoder(fmt: Format, *, schema_id: int = 1) -> Callable[[StorefrontEvent], bytes]:
    """The encoding function for ``fmt`` (``schema_id``: the id ``confluent`` frames carry)."""
    if fmt == "avro":
        return encode_avro
    if fmt == "json":
        return encode_json
    if fmt == "confluent":
        return lambda event: encode_confluent_avro(event, schema_id)
    raise ValueError(f"unknown datagen format {fmt!r} (expected avro, json or confluent)")
