"""Secrets stay out of repr(), error texts, log lines, labels and reports (B67)."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import pytest
from spate import ExitReport, Secret, display_url, redact
from spate.cli._logging import KeyValueFormatter
from spate.config import parse_config
from spate.errors import ConfigError, SinkError

SENTINEL = "Sentinel-b67-q9Zr"


def _yaml(sink_body: str) -> str:
    return (
        "admin: {listen: none}\n"
        "source: {memory: {partitions: 1}}\n"
        f"sink: {{capture: {{}}}}\n"
        f"coordination: {sink_body}\n"
    )


def test_b67_secret_keys_are_marked_and_repr_hides_them() -> None:
    cfg = parse_config(
        _yaml(
            "{store: nats, password: "
            + SENTINEL
            + "-a, rdkafka: {sasl.password: "
            + SENTINEL
            + "-b, ssl.key.password: "
            + SENTINEL
            + "-c, sasl.username: alice}, url: 'http://bob:"
            + SENTINEL
            + "-d@host:8123'}"
        ),
        check_connectors=False,
    )
    assert cfg.coordination is not None
    assert isinstance(cfg.coordination["password"], Secret)
    rdkafka = cfg.coordination["rdkafka"]
    assert isinstance(rdkafka, dict)
    assert isinstance(rdkafka["sasl.password"], Secret)
    assert isinstance(rdkafka["ssl.key.password"], Secret)
    assert not isinstance(rdkafka["sasl.username"], Secret)
    # The client libraries still get the value itself.
    assert rdkafka["sasl.password"] == SENTINEL + "-b"
    text = repr(cfg) + str(cfg)
    assert SENTINEL not in redact(text)
    assert SENTINEL not in repr(cfg.coordination["password"])
    assert "alice" in text


def test_b67_interpolation_errors_name_variable_and_key_never_the_value() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(
            _yaml("{store: nats, password: '" + SENTINEL + "${x'}"), env={}, check_connectors=False
        )
    assert SENTINEL not in str(info.value)
    assert "coordination.password" in str(info.value)
    with pytest.raises(ConfigError) as info:
        parse_config(
            _yaml("{store: nats, password: '" + SENTINEL + "${CH_PW:x}'}"),
            env={"CH_PW": "y"},
            check_connectors=False,
        )
    assert SENTINEL not in str(info.value)
    assert "CH_PW" in str(info.value)


def test_b67_secrets_from_files(tmp_path: Path) -> None:
    secret = tmp_path / "ch-password"
    secret.write_text(SENTINEL + "-file\n", encoding="utf-8")
    cfg = parse_config(
        _yaml(f"{{store: nats, password_file: {secret}, token: '${{file:{secret}}}'}}"),
        check_connectors=False,
    )
    assert cfg.coordination is not None
    assert cfg.coordination["password"] == SENTINEL + "-file"
    assert isinstance(cfg.coordination["password"], Secret)
    assert cfg.coordination["token"] == SENTINEL + "-file"
    assert "password_file" not in cfg.coordination
    with pytest.raises(ConfigError, match="password or password_file, not both"):
        parse_config(
            _yaml(f"{{store: nats, password: x, password_file: {secret}}}"),
            check_connectors=False,
        )
    with pytest.raises(ConfigError) as info:
        parse_config(_yaml("{store: nats, password_file: /nonexistent/pw}"), check_connectors=False)
    assert "coordination.password_file" in str(info.value)
    assert "/nonexistent/pw" in str(info.value)


def test_b67_registered_secrets_are_scrubbed_from_errors_reports_and_logs() -> None:
    parse_config(_yaml("{store: nats, token: " + SENTINEL + "-e}"), check_connectors=False)
    message = f"replica refused token {SENTINEL}-e"
    assert SENTINEL not in str(SinkError(message))
    report = ExitReport(pipeline="p", state="failed", reason=message)
    assert SENTINEL not in report.reason and SENTINEL not in report.summary()
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(KeyValueFormatter())
    record = logging.LogRecord("t", logging.DEBUG, "f", 1, "sent %s", (SENTINEL + "-e",), None)
    assert SENTINEL not in handler.format(record)


def test_b67_urls_lose_their_userinfo_in_labels_and_their_password_in_text() -> None:
    url = f"http://bob:{SENTINEL}-f@ch-1:8123"
    assert display_url(url) == "http://ch-1:8123"
    assert redact(f"replica {url} refused") == "replica http://bob:***@ch-1:8123 refused"
    assert display_url("chdb://./data") == "chdb://./data"


def test_b67_log_records_of_any_logger_are_scrubbed_without_the_cli_formatter() -> None:
    """An application's own handler and formatter (and a client library's logger) see no
    registered secret: the message, the traceback and the stack are scrubbed when the
    record is made; a record without a secret keeps its ``msg`` and ``args``."""
    parse_config(_yaml("{store: nats, token: " + SENTINEL + "-g}"), check_connectors=False)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(name)s %(message)s"))
    seen: list[logging.LogRecord] = []
    handler.addFilter(lambda record: seen.append(record) or True)
    library = logging.getLogger("some.client.library")
    library.addHandler(handler)
    library.setLevel(logging.DEBUG)
    try:
        library.debug("headers={'X-Token': %r}", SENTINEL + "-g")
        try:
            raise RuntimeError(f"refused {SENTINEL}-g")
        except RuntimeError:
            library.exception("request failed", stack_info=True)
        library.debug("nothing secret in %s", "here")
    finally:
        library.removeHandler(handler)
    text = stream.getvalue()
    assert SENTINEL not in text
    assert "X-Token': '***'" in text and "RuntimeError: refused ***" in text
    assert (seen[-1].msg, seen[-1].args) == ("nothing secret in %s", ("here",))
