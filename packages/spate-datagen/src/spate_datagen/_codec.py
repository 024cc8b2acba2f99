"""Encode storefront events as raw Avro (the top-level union) or JSON.

Avro ``raw`` framing is what the flagship reads: the zig-zag varint index of the union
branch, then the branch record — no magic byte, no schema id. The union's branch order
is the order of :data:`KINDS`. JSON events are one object each with a ``kind`` field.
"""

from __future__ import annotations

import io
import json
from functools import cache
from importlib import resources
from typing import Any, Literal

import fastavro

from spate_datagen._events import KINDS, StorefrontEvent

Format = Literal["avro", "json"]


@cache
def storefront_schema_text() -> str:
    """The writer schema of the storefront union, as JSON text."""
    return resources.files("spate_datagen").joinpath("storefront.avsc").read_text()


@cache
def _parsed_branches() -> tuple[Any, ...]:
    parsed = fastavro.parse_schema(json.loads(storefront_schema_text()))
    return tuple(parsed)


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


def encode_avro(event: StorefrontEvent) -> bytes:
    """Raw Avro of the union: branch index, then the record."""
    buf = io.BytesIO()
    buf.write(_BRANCH_PREFIX[event.kind])
    fastavro.schemaless_writer(buf, _parsed_branches()[_BRANCH_INDEX[event.kind]], event.record)
    return buf.getvalue()


def encode_json(event: StorefrontEvent) -> bytes:
    """One JSON object with a ``kind`` field and the record's fields."""
    return json.dumps({"kind": event.kind, **event.record}, separators=(",", ":")).encode()


def encoder(fmt: Format) -> Any:
    """The encoding function for ``fmt``."""
    if fmt == "avro":
        return encode_avro
    if fmt == "json":
        return encode_json
    raise ValueError(f"unknown datagen format {fmt!r} (expected avro or json)")
