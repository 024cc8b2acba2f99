"""spate-json passes spate's deserializer conformance suite in each framing.

Whole and sliced payload views decode alike, values never borrow the view, malformed
and truncated payloads raise ``DeserError`` (B28), config keys are strict (B17).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

import orjson
from spate.testing.conformance import DeserializerConformance
from spate_json import JsonDeserializerFactory

EVENTS: list[object] = [
    {"kind": "OrderPlaced", "order_id": 1, "lines": [{"sku": "a", "qty": 2}], "note": None},
    {"kind": "PaymentCaptured", "order_id": 1, "amount": 12.5, "ok": True, "tag": "ü€"},
    {"kind": "RefundIssued", "order_id": 2, "nested": {"deep": [1, [2, {"x": "y"}]]}},
]

MALFORMED = [b"{", b'{"a": }', b"\xff\xfe", b'{"a": 1} trailing', b"[1, 2", b"nul"]


class _JsonConformance(DeserializerConformance):
    factory = JsonDeserializerFactory
    tag = "json"
    framing: ClassVar[str] = "single"

    def config(self) -> Mapping[str, object]:
        return {"framing": self.framing}

    def invalid_configs(self) -> Sequence[tuple[Mapping[str, object], str]]:
        return [
            ({"framing": "xml"}, "framing"),
            ({"target": "no-colon"}, "target"),
            ({"on_error": "retry"}, "on_error"),
        ]


class TestSingleJsonConformance(_JsonConformance):
    framing = "single"

    def samples(self) -> Sequence[tuple[bytes, list[object]]]:
        return [(orjson.dumps(e), [e]) for e in EVENTS] + [(b"", [])]

    def malformed(self) -> Sequence[bytes]:
        return [*MALFORMED, b"[1, 2]"]  # top_level: object refuses an array


class TestNdjsonConformance(_JsonConformance):
    framing = "ndjson"

    def samples(self) -> Sequence[tuple[bytes, list[object]]]:
        lines = b"\n".join(orjson.dumps(e) for e in EVENTS) + b"\n"
        return [(lines, list(EVENTS)), (orjson.dumps(EVENTS[0]), [EVENTS[0]])]

    def malformed(self) -> Sequence[bytes]:
        return MALFORMED


class TestArrayJsonConformance(_JsonConformance):
    framing = "array"

    def samples(self) -> Sequence[tuple[bytes, list[object]]]:
        return [(orjson.dumps(EVENTS), list(EVENTS)), (b"[]", [])]

    def malformed(self) -> Sequence[bytes]:
        return [*MALFORMED, orjson.dumps(EVENTS[0])]  # an object, not an array
