"""spate-protobuf passes spate's deserializer conformance suite in ``raw`` and ``confluent``.

Whole and sliced payload views decode alike, decoded records never borrow the view,
malformed and truncated payloads raise ``DeserError`` (B28), config keys are strict (B17).
The confluent mode runs against the registry test server with the schema prewarmed.
"""

from __future__ import annotations

import base64
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from spate.testing.conformance import DeserializerConformance
from spate_protobuf import ProtobufDeserializerFactory

from tests.support.schema_registry import SchemaRegistryServer

_PROTOS = Path(__file__).parent / "protos"
_DIR = Path(tempfile.mkdtemp(prefix="spate-protobuf-conformance-"))
_SET = _DIR / "order.pb"
subprocess.run(
    [
        "protoc",
        f"-I{_PROTOS}",
        "--include_imports",
        f"--descriptor_set_out={_SET}",
        "shop/v1/order.proto",
    ],
    check=True,
)
_FILES = descriptor_pb2.FileDescriptorSet.FromString(_SET.read_bytes()).file
_POOL = descriptor_pool.DescriptorPool()
for _file in _FILES:
    _POOL.Add(_file)
Order: Any = message_factory.GetMessageClass(_POOL.FindMessageTypeByName("shop.v1.Order"))

_EMPTY: dict[str, Any] = {
    "order_id": 0,
    "region": "",
    "placed_at": None,
    "status": "STATUS_UNKNOWN",
    "lines": [],
    "labels": {},
    "card": None,
    "voucher": None,
    "note": None,
    "raw": b"",
    "total": 0.0,
    "discount": None,
    "audit": None,
    "prep": None,
    "by_sku": {},
    "history": [],
    "extra": None,
    "big": 0,
    "gift": False,
}


def _full() -> tuple[bytes, dict[str, Any]]:
    m = Order(order_id=2**40, region="t-ü", status=2, note="late", raw=b"\x00\xff", total=1.5)
    m.placed_at.seconds, m.placed_at.nanos = 1_700_000_000, 250_000_000
    m.lines.add(sku="a", qty=2)
    m.labels["site"] = "a"
    m.voucher = 7
    m.discount.value = 3
    m.history.extend([1, 2])
    expected = dict(
        _EMPTY,
        order_id=2**40,
        region="t-ü",
        status="SHIPPED",
        note="late",
        raw=b"\x00\xff",
        total=1.5,
        placed_at=datetime(2023, 11, 14, 22, 13, 20, 250_000, tzinfo=UTC),
        lines=[{"sku": "a", "qty": 2}],
        labels={"site": "a"},
        voucher=7,
        discount=3,
        history=["PLACED", "SHIPPED"],
    )
    return m.SerializeToString(), expected


SAMPLES: list[tuple[bytes, dict[str, Any]]] = [(b"", dict(_EMPTY)), _full()]
MALFORMED = [b"\x0a", b"\x12\x05ab", b"\xff\xff\xff", b"\x08" + b"\xff" * 11]


class TestRawProtobufConformance(DeserializerConformance):
    factory = ProtobufDeserializerFactory
    tag = "protobuf"

    def config(self) -> Mapping[str, object]:
        return {"mode": "raw", "descriptor_set": str(_SET), "message": "shop.v1.Order"}

    def invalid_configs(self) -> Sequence[tuple[Mapping[str, object], str]]:
        return [
            ({"mode": "raw", "message": "shop.v1.Order"}, "descriptor_set"),
            ({"mode": "raw", "descriptor_set": str(_SET)}, "message"),
            ({"mode": "avro", "descriptor_set": str(_SET), "message": "x"}, "mode"),
            ({**self.config(), "enums": "ordinals"}, "enums"),
            ({**self.config(), "fetch_wait": "x"}, "fetch_wait"),
        ]

    def samples(self) -> Sequence[tuple[bytes, list[object]]]:
        return [(payload, [expected]) for payload, expected in SAMPLES]

    def malformed(self) -> Sequence[bytes]:
        return MALFORMED


class TestConfluentProtobufConformance(DeserializerConformance):
    factory = ProtobufDeserializerFactory
    tag = "protobuf"
    registry: SchemaRegistryServer | None = None
    schema_id = 0

    @classmethod
    def setup_class(cls) -> None:
        cls.registry = SchemaRegistryServer().start()
        serialized = next(f for f in _FILES if f.name == "shop/v1/order.proto")
        cls.schema_id = cls.registry.register(
            "orders-value", base64.b64encode(serialized.SerializeToString()).decode(), "PROTOBUF"
        )

    @classmethod
    def teardown_class(cls) -> None:
        if cls.registry is not None:
            cls.registry.stop()

    def config(self) -> Mapping[str, object]:
        assert self.registry is not None
        return {
            "mode": "confluent",
            "registry": {"url": self.registry.url},
            "prewarm_subjects": ["orders-value"],
            "fetch_wait": "5s",
        }

    def invalid_configs(self) -> Sequence[tuple[Mapping[str, object], str]]:
        return [
            ({"mode": "confluent"}, "registry"),
            ({**self.config(), "message": "shop.v1.Order"}, "message"),
        ]

    def _frame(self, body: bytes, index: bytes = b"\x00") -> bytes:
        return b"\x00" + self.schema_id.to_bytes(4, "big") + index + body

    def samples(self) -> Sequence[tuple[bytes, list[object]]]:
        # Order is the second top-level type of the file: index array [1] = count 1, 1.
        return [(self._frame(payload, b"\x02\x02"), [expected]) for payload, expected in SAMPLES]

    def malformed(self) -> Sequence[bytes]:
        return [
            b"",
            b"\x01\x00\x00\x00\x01\x00",
            b"\x00\x00\x00",
            self._frame(b"", b"\x02"),  # index array cut short
            self._frame(b"", b"\x02\x0a"),  # no fifth top-level type
            *(self._frame(m, b"\x02\x02") for m in MALFORMED),
        ]
