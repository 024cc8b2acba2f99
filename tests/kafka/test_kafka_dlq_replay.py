"""B130: ``spate dlq replay`` whose reading fails midway, on the real broker.

The dead-letter topic is read by the command's own consumer; after half of its records the
read fails (injected, as a broker error would surface). Every record handed to the
producer before the failure must be delivered (the producer is flushed on that path too),
the command must say how many and from where a re-run goes on, and a re-run from there
must deliver the rest with no record twice.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from spate.errors import SpateError
from spate_kafka import cli as _dlq
from spate_kafka.cli import DeadLetterRecord, DlqCommand

from tests.support.scale import scaled
from tests.support.services import consume, create_topic, end_offsets, produce_keyed, unique_name

pytestmark = pytest.mark.integration

CONFIG = """
pipeline: {{name: b130}}
source:
  kafka: {{brokers: "{brokers}", topic: {topic}, group_id: {group}}}
sink:
  capture: {{}}
dead_letter:
  sink:
    kafka: {{brokers: "{brokers}", topic: {dlq}}}
"""


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    DlqCommand.configure(parser)
    return parser.parse_args(list(argv))


def test_b130_a_replay_whose_reading_fails_midway_delivers_what_it_sent_and_says_where_to_go_on(
    kafka_bootstrap: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    dlq, topic = unique_name("b130-dlq"), unique_name("b130-src")
    create_topic(kafka_bootstrap, dlq, 2)
    create_topic(kafka_bootstrap, topic, 1)
    count = scaled(400, minimum=40)
    produce_keyed(kafka_bootstrap, dlq, count)
    config = tmp_path / "b130.yaml"
    config.write_text(
        CONFIG.format(brokers=kafka_bootstrap, topic=topic, group=unique_name("g"), dlq=dlq)
    )
    read = _dlq.read_dead_letters
    stop_after = count // 2

    def failing(sink: Any, **kwargs: Any) -> Iterator[DeadLetterRecord]:
        for n, record in enumerate(read(sink, **kwargs)):
            if n == stop_after:
                raise SpateError(f"kafka: reading {sink.topic!r}: Broker: Not leader")
            yield record

    with monkeypatch.context() as patch:
        patch.setattr(_dlq, "read_dead_letters", failing)
        assert DlqCommand.run(_args("replay", str(config))) == 1
    err = capsys.readouterr().err
    assert "Not leader" in err, err
    assert f"{stop_after} of {stop_after} record(s) delivered" in err, err
    # Nothing sent was left in the producer: the topic holds exactly the records read.
    assert sum(end_offsets(kafka_bootstrap, topic).values()) == stop_after
    resume = err.split("to go on without repeating them: ", 1)[1].split()
    assert resume[0] == "--from", err

    assert DlqCommand.run(_args("replay", str(config), *resume)) == 0
    out = capsys.readouterr().out
    assert f"replayed {count - stop_after} record(s)" in out, out
    records = consume(kafka_bootstrap, topic, unique_name("check"), count, commit=False)
    keys = sorted(r.key for r in records if r.key is not None)
    assert keys == sorted(b"k%d" % i for i in range(count)), "a record missing or twice"
    assert sum(end_offsets(kafka_bootstrap, topic).values()) == count
