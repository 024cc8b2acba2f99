"""B22, B23: a running memory pipeline serves every documented family and its probes."""

from __future__ import annotations

import re
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from spate.admin import AdminServer
from spate.config import BackpressureConfig, CheckpointConfig
from spate.metrics import ALL_FAMILIES, BASE_LABELS, Meter
from spate.metrics.names import COORDINATION_FAMILIES
from spate.pipeline import ExitReport, Pipeline
from spate.testing import CopyToSinkProcessor, capture_sink, memory_source

GUIDE = Path(__file__).resolve().parents[4] / "docs" / "guides" / "monitoring.md"
_ROW = re.compile(r"^\| `(spate_[a-z0-9_]+)` \| (counter|gauge|histogram) \| ([^|]*) \|")


def documented_families() -> dict[str, tuple[str, tuple[str, ...]]]:
    """Family → (type, labels) from the monitoring guide's table."""
    found: dict[str, tuple[str, tuple[str, ...]]] = {}
    for line in GUIDE.read_text(encoding="utf-8").splitlines():
        match = _ROW.match(line)
        if match:
            labels = tuple(re.findall(r"`([a-z_]+)`", match.group(3)))
            found[match.group(1)] = (match.group(2), labels)
    return found


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_b23_the_guide_documents_exactly_the_families_in_names() -> None:
    documented = documented_families()
    declared = {f.name: (f.kind, f.labels) for f in ALL_FAMILIES}
    assert documented == declared


def test_b22_b23_live_scrape_of_a_memory_pipeline() -> None:
    documented = documented_families()
    data = {p: [f"{p}:{i}".encode() for i in range(50)] for p in range(3)}
    source, handle = memory_source(data, bounded=False, batch_size=10)
    backpressure = BackpressureConfig()
    budget = Pipeline.new_budget(backpressure)
    sink, _script = capture_sink("sink", budget=budget, threaded=True)
    meter = Meter("live-scrape")
    pipeline = Pipeline(
        "live-scrape",
        source,
        {"sink": sink},
        processor=CopyToSinkProcessor(sink),
        checkpoint=CheckpointConfig(interval=0.1),
        backpressure=backpressure,
        meter=meter,
        budget=budget,
        handle_signals=False,
    )
    admin = AdminServer("127.0.0.1:0", registry=meter.registry, pipeline="live-scrape")
    pipeline.add_service(admin.start, admin.stop)
    reports: list[ExitReport] = []
    runner = threading.Thread(target=lambda: reports.append(pipeline.run()), daemon=True)
    runner.start()
    try:
        deadline = time.monotonic() + 20
        status = 0
        while time.monotonic() < deadline:
            if admin.url is not None:
                status, _ = _get(f"{admin.url}/readyz")
                if status == 200 and handle.last_committed(2) == 50:
                    break
            time.sleep(0.05)
        assert status == 200, "the pipeline never became ready"
        assert _get(f"{admin.url}/healthz")[0] == 200
        status, text = _get(f"{admin.url}/metrics")
        assert status == 200
    finally:
        pipeline.request_stop("test over")
        runner.join(timeout=30)
    assert reports and reports[0].exit_code == 0, reports
    assert admin.url is None  # stopped with the run

    scraped = {family.name: family for family in text_string_to_metric_families(text)}
    coordination = {family.name for family in COORDINATION_FAMILIES}
    # Not a coordinated pipeline: its families are left out.
    assert not [key for key in scraped if key.startswith("spate_coordination_")]
    for name, (kind, labels) in documented.items():
        if name in coordination:
            continue
        # The parser drops the _total suffix of counters from the family name.
        key = name.removesuffix("_total") if kind == "counter" else name
        assert key in scraped, f"{name} is documented but not served"
        assert scraped[key].type == kind, name
        for sample in scraped[key].samples:
            extra = {"le"} if kind == "histogram" else set()
            assert set(sample.labels) - extra == {*BASE_LABELS, *labels}, sample
            assert sample.labels["pipeline"] == "live-scrape"
    records = {
        s.labels["lane"]: s.value
        for s in scraped["spate_source_records"].samples
        if s.name == "spate_source_records_total"
    }
    assert records == {"memory[0]": 50.0, "memory[1]": 50.0, "memory[2]": 50.0}
