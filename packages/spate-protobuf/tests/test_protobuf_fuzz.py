"""Random bytes into every Protobuf decoder: only ``DeserError`` comes out, never a crash (B28)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.deser_fuzz import (
    EXAMPLES,
    closing_all,
    decode_or_record_error,
    random_batches_test,
    random_bytes_test,
)
from tests.support.schema_registry import SchemaRegistryServer


@pytest.fixture(scope="module")
def decoders(kit: Any, order_set: Path, order_classes: Any) -> Iterator[Mapping[str, Any]]:
    with SchemaRegistryServer() as registry:
        schema_id = registry.register(
            "orders-value", order_classes.serialized("shop/v1/order.proto"), "PROTOBUF"
        )
        assert schema_id == 1
        built = {
            "raw-order": kit.build(
                {"mode": "raw", "descriptor_set": str(order_set), "message": "shop.v1.Order"}
            ),
            "raw-line-numbers": kit.build(
                {
                    "mode": "raw",
                    "descriptor_set": str(order_set),
                    "message": "shop.v1.Line",
                    "enums": "numbers",
                }
            ),
            "confluent": kit.build(
                {
                    "mode": "confluent",
                    "registry": {"url": registry.url},
                    "prewarm_subjects": ["orders-value"],
                    "fetch_wait": "0s",
                }
            ),
        }
        with closing_all(built) as decoders:
            yield decoders


# Known id with the first, second and a nested type; an id the registry lacks.
prefixes = st.sampled_from(
    [
        b"",
        b"\x00\x00\x00\x00\x01\x00",
        b"\x00\x00\x00\x00\x01\x02\x02",
        b"\x00\x00\x00\x00\x01\x04\x02\x00",
        b"\x00\x00\x00\x00\x02",
    ]
)


test_random_bytes_give_only_counted_record_errors_b28 = random_bytes_test(prefixes)
test_random_batches_through_the_stage_are_all_counted_b28 = random_batches_test("raw-order")


@settings(
    max_examples=max(50, EXAMPLES // 4),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_mutated_valid_messages_give_only_record_errors_b28(
    decoders: Mapping[str, Any], order_classes: Any, data: st.DataObject
) -> None:
    """Flip, cut and splice bytes of a real message: deeper paths than random bytes reach."""
    Order = order_classes["shop.v1.Order"]
    order = Order(order_id=data.draw(st.integers(-(2**63), 2**63 - 1)), region="r", card="c")
    order.placed_at.seconds = data.draw(st.integers(-(2**40), 2**40))
    order.lines.add(sku="s", qty=1)
    order.labels["k"] = "v"
    order.audit.parent.audit.by = "x"
    wire = bytearray(order.SerializeToString())
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(wire) - 1))
        wire[at] = data.draw(st.integers(0, 255))
    wire = wire[: data.draw(st.integers(0, len(wire)))]
    for name in ("raw-order", "confluent"):
        prefix = b"\x00\x00\x00\x00\x01\x02\x02" if name == "confluent" else b""
        decode_or_record_error(name, decoders[name], memoryview(prefix + bytes(wire)))
