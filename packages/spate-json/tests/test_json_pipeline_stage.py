"""The JSON deserializer inside a real pipeline: outcomes counted by the stage (B21, B28).

The deserializer stage of spate-core counts ``spate_deser_records_total{outcome}`` and
applies ``on_error``; a memory source (views sliced from one buffer) feeds it here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
from spate.metrics._meter import Meter
from spate.pipeline import Pipeline
from spate.testing import ManualClock, capture_sink, memory_source
from spate_json import JsonDeserializer

Build = Callable[[dict[str, Any]], JsonDeserializer]


def _count(meter: Meter, family: str, **labels: str) -> float:
    base = {"pipeline": meter.pipeline, "component": "deserializer"}
    value = meter.registry.get_sample_value(
        family, base | {"component_type": "deserializer"} | labels
    )
    return value or 0.0


def _run(
    name: str, deser: JsonDeserializer, payloads: list[bytes]
) -> tuple[Any, list[object], Meter, Any]:
    source, handle = memory_source({0: payloads}, batch_size=3)
    clock = ManualClock()
    sink, script = capture_sink("out", clock=clock)
    meter = Meter(name)
    report = Pipeline(
        name,
        source,
        {"out": sink},
        deserializer=deser,
        clock=clock,
        meter=meter,
        handle_signals=False,
    ).run()
    return report, script.rows, meter, handle


def test_single_skips_invalid_and_wrong_type_counts_empty_b28(build_json: Build) -> None:
    payloads = [b'{"a": 1}', b"{bad", b"", b"[1, 2]", b'{"a": 2}', b"  ", b'{"a": 3}']
    report, rows, meter, handle = _run("json-single", build_json({}), payloads)
    assert report.exit_code == 0
    assert rows == [{"a": 1}, {"a": 2}, {"a": 3}]
    assert handle.last_committed(0) == len(payloads)
    assert _count(meter, "spate_deser_records_total", outcome="ok") == 3
    assert _count(meter, "spate_deser_records_total", outcome="skipped") == 2
    assert _count(meter, "spate_deser_records_total", outcome="empty") == 2
    assert _count(meter, "spate_deser_dropped_total", reason="malformed") == 2
    assert _count(meter, "spate_deser_dropped_total", reason="empty") == 2


def test_ndjson_bad_line_is_one_skipped_record_b21(build_json: Build) -> None:
    chunk = b'{"a": 1}\n{"a": \n{"a": 2}\n"str"\n{"a": 3}\n'
    report, rows, meter, handle = _run("json-ndjson", build_json({"framing": "ndjson"}), [chunk])
    assert report.exit_code == 0
    assert rows == [{"a": 1}, {"a": 2}, {"a": 3}]
    assert handle.last_committed(0) == 1
    assert _count(meter, "spate_deser_records_total", outcome="skipped") == 2
    assert _count(meter, "spate_deser_dropped_total", reason="malformed") == 2


def test_array_with_one_bad_element_skips_the_whole_payload_b21(build_json: Build) -> None:
    good = orjson.dumps([{"a": 1}, {"a": 2}])
    bad = b'[{"a": 3}, 4, {"a": 5}]'
    report, rows, meter, handle = _run(
        "json-array", build_json({"framing": "array"}), [good, bad, good]
    )
    assert report.exit_code == 0
    assert rows == [{"a": 1}, {"a": 2}, {"a": 1}, {"a": 2}]
    assert handle.last_committed(0) == 3
    assert _count(meter, "spate_deser_records_total", outcome="skipped") == 1


def test_invalid_json_under_fail_policy_fails_the_pipeline_b28(build_json: Build) -> None:
    payloads = [b'{"a": 1}', b'{"a": 2}', b'{"a": 3}', b"nope", b'{"a": 5}']
    report, _, meter, handle = _run("json-fail", build_json({"on_error": "fail"}), payloads)
    assert report.exit_code == 1
    assert "invalid JSON" in report.reason
    assert _count(meter, "spate_deser_records_total", outcome="failed") == 1
    committed = handle.last_committed(0)
    assert committed is None or committed <= 3
