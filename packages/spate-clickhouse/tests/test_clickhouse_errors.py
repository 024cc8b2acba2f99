"""Error classes by exception code, HTTP status and client exception (B12, B29)."""

from __future__ import annotations

import inspect

import pytest
from clickhouse_connect.driver import exceptions as ch_exc
from spate.errors import ErrorClass, SinkError
from spate_clickhouse import FATAL_CODES, classify, classify_code
from spate_clickhouse._errors import AUTH_CODES, RETRYABLE_EXAMPLES, SCHEMA_CODES, to_sink_error

FATAL, RETRYABLE = ErrorClass.FATAL, ErrorClass.RETRYABLE


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (62, FATAL),  # SYNTAX_ERROR
        (60, FATAL),  # UNKNOWN_TABLE
        (16, FATAL),  # NO_SUCH_COLUMN_IN_TABLE
        (516, FATAL),  # AUTHENTICATION_FAILED
        (497, FATAL),  # ACCESS_DENIED
        (53, FATAL),  # TYPE_MISMATCH
        (27, FATAL),  # CANNOT_PARSE_INPUT_ASSERTION_FAILED
        (439, RETRYABLE),  # CANNOT_SCHEDULE_TASK (overload)
        (252, RETRYABLE),  # TOO_MANY_PARTS
        (241, RETRYABLE),  # MEMORY_LIMIT_EXCEEDED
        (159, RETRYABLE),  # TIMEOUT_EXCEEDED
        (209, RETRYABLE),  # SOCKET_TIMEOUT
        (319, RETRYABLE),  # UNKNOWN_STATUS_OF_INSERT
        (242, RETRYABLE),  # TABLE_IS_READ_ONLY
        (12345, RETRYABLE),  # anything not listed
    ],
)
def test_b12_codes_are_classified(code: int, expected: ErrorClass) -> None:
    assert classify_code(code) is expected
    assert classify(ch_exc.DatabaseError(f"Code: {code}. DB::Exception: x", code=code)) is expected


def test_the_fatal_and_retryable_tables_do_not_overlap() -> None:
    assert not set(FATAL_CODES) & set(RETRYABLE_EXAMPLES)
    assert set(AUTH_CODES) | set(SCHEMA_CODES) <= set(FATAL_CODES)


def test_a_code_in_the_text_counts_when_the_attribute_is_missing() -> None:
    assert (
        classify(ch_exc.DatabaseError("Code: 60. DB::Exception: Table x does not exist")) is FATAL
    )


def test_errors_without_a_code_go_by_status_then_class() -> None:
    assert classify(ch_exc.DatabaseError("HTTP driver received HTTP status 503")) is RETRYABLE
    assert classify(ch_exc.DatabaseError("HTTP driver received HTTP status 401")) is FATAL
    assert classify(ch_exc.OperationalError("Error HTTPConnectionPool timed out")) is RETRYABLE
    assert classify(ch_exc.ProgrammingError("bad use")) is FATAL
    assert classify(ch_exc.DatabaseError("something odd")) is RETRYABLE


def test_transport_errors_are_retryable_and_client_encoding_errors_fatal() -> None:
    assert classify(ConnectionResetError()) is RETRYABLE
    assert classify(TimeoutError()) is RETRYABLE
    assert classify(ValueError("invalid literal for int()")) is FATAL
    assert classify(OverflowError("float too large")) is FATAL


def test_every_client_exception_class_is_mapped() -> None:
    classes = [
        obj
        for _, obj in inspect.getmembers(ch_exc, inspect.isclass)
        if issubclass(obj, BaseException) and obj.__module__ == ch_exc.__name__
    ]
    assert len(classes) >= 10
    for cls in classes:
        try:
            exc = cls("boom")
        except TypeError:
            exc = cls()
        assert classify(exc) in (FATAL, RETRYABLE), cls


def test_sink_errors_name_endpoint_code_and_class() -> None:
    error = to_sink_error(
        ch_exc.DatabaseError("Code: 516. DB::Exception: default: Authentication failed", code=516),
        "http://127.0.0.1:8123",
    )
    assert isinstance(error, SinkError)
    assert error.error_class is FATAL
    assert "http://127.0.0.1:8123" in error.reason
    assert "code 516 AUTHENTICATION_FAILED" in error.reason


def test_b29_chdb_url_without_chdb_names_spates_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    """Without chDB, ``chdb://`` fails at connect with spate's own install hint."""
    import sys

    from spate_clickhouse._client import connect
    from spate_clickhouse._endpoint import parse_endpoint

    monkeypatch.setitem(sys.modules, "chdb", None)  # as if not installed
    endpoint = parse_endpoint(f"chdb://{tmp_path}")
    with pytest.raises(SinkError) as info:
        connect(endpoint, None)  # type: ignore[arg-type]  # never reached
    assert info.value.error_class is ErrorClass.FATAL
    message = str(info.value)
    assert "spate[clickhouse-embedded]" in message
    assert './packages/spate-clickhouse[embedded]"' in message
    assert "clickhouse-connect[chdb]" not in message
