"""spate-http's source passes spate's source conformance suite (B1, B7, B17, B76).

Against the local readings API on loopback, bounded to one tick (``max_ticks: 1``)
whose 30 readings come in pages of 7, so one tick is several batches of the one lane:
every record once in order then ``drained()`` once, positions never past what was
handed out, no commit of its own (nothing reaches the state file without ``commit``),
an exact resume at a synchronous commit (the state file's offset and delivered keys),
pause and resume.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from spate.source import Source
from spate.testing.conformance import SourceConformance, conformance_context
from spate_http import HttpPollConfig, HttpPollSourceFactory
from spate_http._fetch import encode

from tests.support.api_server import ApiServer, Readings, reading


class TestHttpPollSourceConformance(SourceConformance):
    factory = HttpPollSourceFactory
    tag = "http_poll"
    partitions = 1
    records = 30
    poll_timeout = 0.1
    patience = 20.0

    def config(self) -> Mapping[str, object]:
        return {"url": "http://127.0.0.1:1/readings", "records": "data.items"}

    def invalid_configs(self) -> Sequence[tuple[Mapping[str, object], str]]:
        url = "http://127.0.0.1:1/"
        return [
            ({"url": "ftp://host/"}, "url"),
            ({"url": url, "dedupe_window": "soon"}, "dedupe_window"),
            ({"url": url, "dedupe_window": "0"}, "dedupe_window"),
            ({"url": url, "key": "not a function"}, "key"),
            ({"url": url, "key": []}, "key"),
            ({"url": url, "records": "a", "collector": "m:f"}, "collector"),
            ({"url": url, "on_error": "dead_letter"}, "on_error"),
            ({"url": url, "interval": "0s"}, "interval"),
            ({"url": url, "pagination": {"next_link": "a", "cursor": "b"}}, "pagination.cursor"),
            ({"url": url, "retry": {"max_attempts": 0}}, "retry.max_attempts"),
        ]

    def produce(self, partitions: int, records: int) -> dict[int, list[bytes]]:
        self.app = Readings(overlap=records, step=records, page_size=7, limit=records)
        self.server = ApiServer(self.app).__enter__()
        return {0: [encode(reading(n)) for n in range(records)]}

    def teardown_method(self, method: object = None) -> None:
        server = getattr(self, "server", None)
        if server is not None:
            server.__exit__()
        super().teardown_method(method)

    def open_source(self) -> Source:
        config: HttpPollConfig = self.decode_config(
            {
                "url": f"{self.server.url}/readings",
                "records": "data.items",
                "key": ["station_id", "timestamp"],
                "pagination": {"cursor": "meta.next_cursor"},
                "state_path": str(self.workdir / "state.json"),
                "max_ticks": 1,
                "interval": "50ms",
            }
        )
        return HttpPollSourceFactory.build(config, conformance_context("source"))
