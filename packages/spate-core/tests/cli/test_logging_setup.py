"""The command's log: one line per event, spate's own (B42, issue of failed writes).

A failed ClickHouse write is reported by spate with the endpoint and what happens next;
urllib3 and clickhouse-connect log the same failure again as warnings of their own,
which the command shows only at ``--log-level debug``."""

from __future__ import annotations

import io
import logging

import pytest
from spate.cli._logging import THIRD_PARTY_LEVELS, configure_logging


@pytest.fixture(autouse=True)
def _restore_levels() -> object:
    root = logging.getLogger()
    saved = root.level, list(root.handlers)
    yield
    root.setLevel(saved[0])
    for handler in list(root.handlers):
        if handler not in saved[1]:
            root.removeHandler(handler)
    for name in THIRD_PARTY_LEVELS:
        logging.getLogger(name).setLevel(logging.NOTSET)


def _emit() -> None:
    logging.getLogger("urllib3.connectionpool").warning("Retrying (Retry(total=0)) after ...")
    logging.getLogger("clickhouse_connect.driver.client").warning("a clickhouse-connect warning")
    logging.getLogger("httpx").info("HTTP Request: GET http://api/x 200 OK")
    logging.getLogger("spate_clickhouse.x").warning("insert into t at http://ch:8123 failed")
    logging.getLogger("urllib3.connectionpool").error("a real urllib3 error")


def test_third_party_repeats_are_hidden_below_debug_and_shown_at_debug() -> None:
    out = io.StringIO()
    configure_logging("info", stream=out)
    _emit()
    text = out.getvalue()
    assert "insert into t at http://ch:8123 failed" in text
    assert "a real urllib3 error" in text
    assert "Retrying" not in text
    assert "a clickhouse-connect warning" not in text
    assert "HTTP Request" not in text

    out = io.StringIO()
    configure_logging("debug", stream=out)
    _emit()
    text = out.getvalue()
    assert "Retrying" in text and "a clickhouse-connect warning" in text
    assert "HTTP Request" in text
