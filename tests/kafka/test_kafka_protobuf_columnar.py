"""Protobuf from the real broker into ClickHouse on the columnar path (B142, B87).

Protobuf messages, raw (a descriptor set written by the test, no protoc needed) and
Confluent-framed (the schema from the registry test server), with bad payloads among
them (a truncated message, bytes that are no message, a string that is not UTF-8), go
through a YAML-only pipeline (``stop_at: end``, no chain) into the ClickHouse HTTP front
over chDB. The run must say it ran columnar, store every good record once with the row
path's values (enum names, the timestamp's microseconds, the repeated field, the map),
count the bad ones as skipped, and commit the partitions' ends, bad records included
(B3).
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import (
    descriptor_pb2,
    descriptor_pool,
    message_factory,
    text_format,
    timestamp_pb2,
)

from tests.support.chfront_fixtures import ChFront
from tests.support.columnar_run import committed_total, deser_count, run_kafka_columnar
from tests.support.scale import scaled
from tests.support.schema_registry import SchemaRegistryServer

pytest.importorskip("polars")
pytest.importorskip("ptars")

pytestmark = pytest.mark.integration

PROTO = """
name: "colorders.proto" package: "colorders" syntax: "proto3"
dependency: "google/protobuf/timestamp.proto"
enum_type { name: "Status" value { name: "UNKNOWN" number: 0 } value { name: "PLACED" number: 1 }
            value { name: "SHIPPED" number: 2 } }
message_type {
  name: "Order"
  field { name: "order_id" number: 1 label: LABEL_OPTIONAL type: TYPE_INT64 }
  field { name: "region" number: 2 label: LABEL_OPTIONAL type: TYPE_STRING }
  field { name: "amount" number: 3 label: LABEL_OPTIONAL type: TYPE_DOUBLE }
  field { name: "placed_at" number: 4 label: LABEL_OPTIONAL type: TYPE_MESSAGE
          type_name: ".google.protobuf.Timestamp" }
  field { name: "status" number: 5 label: LABEL_OPTIONAL type: TYPE_ENUM
          type_name: ".colorders.Status" }
  field { name: "tags" number: 6 label: LABEL_REPEATED type: TYPE_STRING }
  field { name: "labels" number: 7 label: LABEL_REPEATED type: TYPE_MESSAGE
          type_name: ".colorders.Order.LabelsEntry" }
  nested_type {
    name: "LabelsEntry" options { map_entry: true }
    field { name: "key" number: 1 label: LABEL_OPTIONAL type: TYPE_STRING }
    field { name: "value" number: 2 label: LABEL_OPTIONAL type: TYPE_STRING }
  }
}
"""

YAML = """
pipeline: {name: %(name)s}
admin: {listen: none}
source:
  kafka: {brokers: "%(brokers)s", topic: %(topic)s, group_id: %(group)s, stop_at: end}
deserializer:
  protobuf: %(deserializer)s
sink:
  clickhouse:
    table: orders
    columns: [order_id, region, amount, placed_at, status, tags, labels]
    shards: [{replicas: ["%(front)s"]}]
    batch: {linger: 100ms}
"""


def _order_class(descriptors: Path) -> tuple[Any, descriptor_pb2.FileDescriptorProto]:
    """Write the descriptor set a raw pipeline reads; return the ``Order`` class and its file."""
    file = text_format.Parse(PROTO, descriptor_pb2.FileDescriptorProto())
    timestamp = descriptor_pb2.FileDescriptorProto()
    timestamp_pb2.DESCRIPTOR.CopyToProto(timestamp)
    descriptors.write_bytes(
        descriptor_pb2.FileDescriptorSet(file=[timestamp, file]).SerializeToString()
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(timestamp)
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("colorders.Order")), file


@pytest.mark.parametrize("mode", ["raw", "confluent"])
def test_b142_protobuf_from_kafka_runs_columnar_keeps_good_records_and_commits_the_end(
    kafka_bootstrap: str, chfront: Callable[..., ChFront], tmp_path: Path, mode: str
) -> None:
    with SchemaRegistryServer() as registry:
        _run(kafka_bootstrap, chfront, tmp_path, mode, registry)


def _run(
    kafka_bootstrap: str,
    chfront: Callable[..., ChFront],
    tmp_path: Path,
    mode: str,
    registry: SchemaRegistryServer,
) -> None:
    count = scaled(20_000, minimum=2_000)
    descriptors = tmp_path / "orders.pb"
    order, file = _order_class(descriptors)
    if mode == "raw":
        section = f'{{mode: raw, descriptor_set: "{descriptors}", message: colorders.Order}}'
        frame = b""
    else:
        serialized = base64.b64encode(file.SerializeToString()).decode("ascii")
        schema_id = registry.register("orders-value", serialized, "PROTOBUF")
        section = f'{{mode: confluent, registry: {{url: "{registry.url}"}}, fetch_wait: 5s}}'
        frame = b"\x00" + schema_id.to_bytes(4, "big") + b"\x00"

    def encode(i: int) -> bytes:
        message = order(
            order_id=i, region=f"r{i % 7}", amount=i / 4, status=i % 3, tags=[f"t{i % 2}"]
        )
        message.placed_at.seconds, message.placed_at.nanos = 1_700_000_000 + i, 123_456_789
        message.labels["k"] = str(i)
        wire: bytes = frame + message.SerializeToString()
        return wire

    bad = {
        7: encode(7)[:-3],
        500: frame + b"\xff\xff\xff\xff",
        1999: frame + b"\x12\x02\xff\xfe",  # region (field 2) holding bytes that are not UTF-8
    }

    def value(i: int) -> bytes:
        return bad[i] if i in bad else encode(i)

    run = run_kafka_columnar(
        kafka_bootstrap,
        chfront,
        tmp_path,
        name="protocol",
        yaml=YAML,
        table="CREATE TABLE orders (order_id Int64, region String, amount Float64, "
        "placed_at DateTime64(6, 'UTC'), status String, tags Array(String), "
        "labels Map(String, String)) ENGINE = MergeTree ORDER BY order_id",
        count=count,
        value=value,
        deserializer=section,
    )
    client = run.client
    ids = [r[0] for r in client.query("SELECT order_id FROM orders ORDER BY order_id").result_rows]
    assert ids == [i for i in range(count) if i not in bad]
    row = client.query(
        "SELECT region, amount, placed_at, status, tags, labels FROM orders WHERE order_id = 5"
    ).result_rows[0]
    assert row[:2] == ("r5", 1.25)
    placed_at = datetime.fromtimestamp(1_700_000_005, UTC).replace(microsecond=123_456)
    assert row[2].replace(tzinfo=UTC) == placed_at  # the client answers naive UTC
    assert row[3:] == ("SHIPPED", ["t1"], {"k": "5"})
    assert deser_count(run.pipeline, "protocol", "skipped") == len(bad)
    assert committed_total(kafka_bootstrap, run) == count
