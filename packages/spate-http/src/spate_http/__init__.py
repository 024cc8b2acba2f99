"""Polling HTTP source for spate (httpx).

``source: {http_poll: {url: ..., interval: 1m, records: data.items, key: [...]}}`` calls
a JSON API on every tick, takes the records out of each response (a dotted path or a
collector function), follows pagination, retries 429 and 5xx answers, drops records
whose key was delivered within ``dedupe_window`` and keeps its position and delivered
keys in a state file that advances only behind the sinks' acknowledgements (B74-B77).

Entry point: ``http_poll = "spate_http:HttpPollSourceFactory"`` in ``spate.sources``.
"""

from spate_http._extract import Extractor, KeyMaker, RecordProblem, load_function, lookup
from spate_http._factory import HttpPollSourceFactory
from spate_http._source import HttpPollSource
from spate_http._state import Checkpoint
from spate_http.config import HttpPollConfig, HttpRetryConfig, PaginationConfig, parse_window

__version__ = "0.1.0"

__all__ = [
    "Checkpoint",
    "Extractor",
    "HttpPollConfig",
    "HttpPollSource",
    "HttpPollSourceFactory",
    "HttpRetryConfig",
    "KeyMaker",
    "PaginationConfig",
    "RecordProblem",
    "__version__",
    "load_function",
    "lookup",
    "parse_window",
]
