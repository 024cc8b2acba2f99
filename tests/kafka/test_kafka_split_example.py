"""examples/kafka_to_kafka_split.py on the real broker: every payment and refund lands in
its own topic, keyed by order id, orders are skipped, and the run exits 0."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from spate import Pipeline, load_config
from spate_datagen import storefront_events
from spate_datagen.cli import produce_events

from tests.support.scale import scaled
from tests.support.services import consume, create_topic, unique_name

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kafka_to_kafka_split.py"


def load_example() -> Any:
    spec = importlib.util.spec_from_file_location("kafka_to_kafka_split", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_split_example_routes_every_event(
    kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, payments, refunds = unique_name("in"), unique_name("pay"), unique_name("ref")
    for topic in (source, payments, refunds):
        create_topic(kafka_bootstrap, topic, 3)
    count = scaled(20_000, minimum=2_000)
    manifest = produce_events(kafka_bootstrap, source, count, fmt="json")
    env = {
        "KAFKA_BROKERS": kafka_bootstrap,
        "KAFKA_TOPIC": source,
        "KAFKA_GROUP": unique_name("g"),
        "PAYMENTS_TOPIC": payments,
        "REFUNDS_TOPIC": refunds,
        "STOP_AT": "end",
        "SPATE_ADMIN_LISTEN": "none",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    example = load_example()
    pipeline = Pipeline.from_config(load_config(example.CONFIG), handle_signals=False)
    report = pipeline.chains(example.chains).run()
    assert report.exit_code == 0, report.summary()

    got_payments = consume(
        kafka_bootstrap, payments, unique_name("r"), manifest.counts["PaymentCaptured"]
    )
    got_refunds = consume(
        kafka_bootstrap, refunds, unique_name("r"), manifest.counts["RefundIssued"]
    )
    expected_payments = {
        str(e.order_id).encode() for e in storefront_events(count) if e.kind == "PaymentCaptured"
    }
    assert {r.key for r in got_payments} == expected_payments
    assert all(json.loads(r.value or b"{}")["kind"] == "PaymentCaptured" for r in got_payments)
    assert all(json.loads(r.value or b"{}")["kind"] == "RefundIssued" for r in got_refunds)
    assert len(got_refunds) == manifest.counts["RefundIssued"]
