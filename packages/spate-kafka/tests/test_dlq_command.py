"""``spate dlq`` option parsing and configuration checks (B73); the reading and the
replay themselves run on the real broker in tests/kafka/test_kafka_dead_letter.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from spate.errors import ConfigError
from spate_kafka.cli import (
    DeadLetterRecord,
    ReplayProgress,
    dead_letter_topic,
    parse_filters,
    parse_since,
    parse_starts,
    select,
)


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


def test_b130_from_takes_partition_offset_pairs() -> None:
    assert parse_starts(["0:17", "2:4"]) == {0: 17, 2: 4}
    with pytest.raises(ConfigError, match="--from"):
        parse_starts(["0"])
    with pytest.raises(ConfigError, match="--from"):
        parse_starts(["a:1"])


def test_b130_a_replay_goes_on_after_the_last_record_delivered_with_all_before_it() -> None:
    progress = ReplayProgress({0: 5, 1: 2, 2: 40})
    reports = {
        (p, o): progress.sent(DeadLetterRecord(p, o, 0, None, b"v", {}))
        for p, o in [(0, 5), (1, 2), (0, 6), (0, 9), (1, 3)]
    }
    for where in [(0, 5), (0, 9), (1, 2), (1, 3)]:
        reports[where](None, None)
    reports[(0, 6)]("timed out", None)
    # Offset 6 failed: 9 is delivered, 6 is not; partition 2 (nothing read) keeps --from.
    assert progress.resume() == {0: 6, 1: 4, 2: 40}
    assert progress.summary("t") == (
        "4 of 5 record(s) delivered into 't'; to go on from the first record not delivered: "
        "--from 0:6 --from 1:4 --from 2:40 (1 record(s) delivered after it are sent again)"
    )
    reports[(0, 6)](None, None)  # as if it had been delivered
    progress.failures.clear()
    assert progress.summary("t").endswith(
        "to go on without repeating them: --from 0:10 --from 1:4 --from 2:40"
    )
