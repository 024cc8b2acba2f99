"""``spate dlq`` option parsing and configuration checks (B73); the reading and the
replay themselves run on the real broker in tests/kafka/test_kafka_dead_letter.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from spate.errors import ConfigError
from spate_kafka._dlq import DeadLetterRecord, dead_letter_topic, parse_filters, parse_since, select


def test_b73_since_takes_an_iso_time_or_a_duration_ago() -> None:
    assert parse_since("2026-05-01T10:00:00+00:00") == 1_777_629_600_000
    assert parse_since("2h", now=10_000.0) == (10_000 - 7200) * 1000
    with pytest.raises(ConfigError, match="--since"):
        parse_since("yesterday-ish")


def test_b73_filters_select_on_the_error_headers() -> None:
    assert parse_filters(["reason=ValueError", "spate.error.stage=operator"]) == {
        "reason": "ValueError",
        "stage": "operator",
    }
    with pytest.raises(ConfigError, match="name=value"):
        parse_filters(["reason"])
    records = [
        DeadLetterRecord(0, n, 1000 * n, b"k", b"v", {"reason": reason, "stage": "operator"})
        for n, reason in enumerate(["ValueError", "KeyError", "ValueError"])
    ]
    chosen = select(iter(records), 1000, {"reason": "ValueError"})
    assert [r.offset for r in chosen] == [2]


def test_b73_a_configuration_without_a_kafka_dead_letter_topic_is_refused(
    tmp_path: Path,
) -> None:
    base = {
        "source": {"kafka": {"brokers": "b:9092", "topic": "t", "group_id": "g"}},
        "sink": {"kafka": {"brokers": "b:9092", "topic": "out"}},
    }
    path = tmp_path / "c.json"
    path.write_text(json.dumps(base))
    with pytest.raises(ConfigError, match="no dead_letter section"):
        dead_letter_topic(str(path))
    path.write_text(
        json.dumps(
            {**base, "dead_letter": {"sink": {"kafka": {"brokers": "b:9092", "topic": "d"}}}}
        )
    )
    sink, source = dead_letter_topic(str(path))
    assert (sink.topic, source.topic if source else None) == ("d", "t")
