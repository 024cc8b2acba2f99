"""A columnar chain ends in the Kafka sink on the real broker (B172).

JSON records are decoded as columns, a frame chain builds each message's ``key`` and
``value`` columns with polars expressions, and the Kafka sink produces them: every
record arrives once with its key and value, the pipeline says it ran on the columnar
path, and a row the sink refuses (a null value) is a record error for that row alone
under ``on_record_error: skip``.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from spate import Pipeline
from spate.config import decode
from spate.flow import InflightBudget
from spate.metrics import Meter
from spate.plugins import BuildContext
from spate.testing import ManualClock, memory_source
from spate_kafka import KafkaSinkConfig, KafkaSinkFactory

from tests.support.columnar_run import watch_columnar
from tests.support.scale import scaled
from tests.support.services import consume, create_topic, unique_name

pl = pytest.importorskip("polars")

pytestmark = pytest.mark.integration


def _context(name: str, component: str, meter: Meter, budget: InflightBudget) -> BuildContext:
    return BuildContext(
        pipeline=name,
        component=component,
        meter=meter,
        clock=ManualClock(),
        run_nonce="r1",
        budget=budget,
    )


def test_b172_a_columnar_chain_ends_in_the_kafka_sink_and_every_record_arrives(
    kafka_bootstrap: str,
) -> None:
    from spate_json import JsonConfig, JsonDeserializerFactory

    bootstrap = kafka_bootstrap
    topic = unique_name("frames-out")
    create_topic(bootstrap, topic, partitions=3)
    count = scaled(3_000, minimum=300)
    payloads = [orjson.dumps({"id": i, "name": f"n{i}", "keep": i % 97 != 5}) for i in range(count)]
    name = unique_name("kafka-frames")
    meter = Meter(name)
    budget = InflightBudget(64 << 20)
    deserializer: Any = JsonDeserializerFactory.build(
        decode(JsonConfig, {}, "deserializer.json"), _context(name, "deserializer", meter, budget)
    )
    config = decode(
        KafkaSinkConfig,
        {
            "brokers": bootstrap,
            "topic": topic,
            "batch": {"max_rows": 500, "linger": "50ms"},
            "on_record_error": "skip",
        },
        "sink.kafka",
    )
    sink = KafkaSinkFactory.build(config, _context(name, "out", meter, budget))
    source, handle = memory_source({0: payloads[::2], 1: payloads[1::2]}, batch_size=250)

    def chains(ctx: Any) -> Any:
        return (
            ctx.frames()
            .select(
                pl.col("id").cast(pl.String).alias("key"),
                # a null value where keep is false: refused for that row alone (B28)
                pl.when(pl.col("keep"))
                .then(pl.struct("id", "name").struct.json_encode())
                .alias("value"),
            )
            .sink("out")
        )

    with watch_columnar() as seen:
        pipeline = Pipeline(
            name,
            source,
            {"out": sink},
            deserializer=deserializer,
            meter=meter,
            budget=budget,
            handle_signals=False,
        )
        pipeline.chains(chains)
        report = pipeline.run()
    assert report.exit_code == 0, report
    assert seen.columnar
    kept = [i for i in range(count) if i % 97 != 5]
    got = consume(bootstrap, topic, unique_name("reader"), len(kept), timeout=120)
    by_key = {r.key: r.value for r in got}
    assert len(got) == len(kept) == len(by_key)
    assert by_key == {str(i).encode(): orjson.dumps({"id": i, "name": f"n{i}"}) for i in kept}
    assert handle.last_committed(0) == len(payloads[::2])
    assert handle.last_committed(1) == len(payloads[1::2])
