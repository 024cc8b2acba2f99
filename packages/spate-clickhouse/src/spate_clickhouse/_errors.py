"""Classify what a ClickHouse write raised: retryable or fatal, by exception code.

Owns the translation of clickhouse-connect's exceptions (and the errors of its ``chdb://``
backend) into :class:`~spate.errors.SinkError` at the sink's boundary. A server error is
classified by its ClickHouse exception code (``X-ClickHouse-Exception-Code`` over HTTP,
``Code: N`` in the text otherwise): syntax, schema, permission and type errors cannot be
cured by sending the same batch again, so they are fatal; overload, timeouts, network
errors, replication trouble and every code not listed here are retryable. An error with no
code is classified by its HTTP status, then by its exception class. An exception raised by
the client while it encodes a block (a value the per-record checks let through) is fatal:
the same rows would fail again.

The same table is printed in ``docs/connectors/clickhouse.md``. Upholds B12 (a fatal class
fails at once, everything else retries with backoff) and B29 (auth and unknown-table errors
at start-up name the endpoint).
"""

from __future__ import annotations

import re
import socket
import struct

from clickhouse_connect.driver import exceptions as ch_exc
from spate.errors import ErrorClass, SinkError

SYNTAX_CODES: dict[int, str] = {
    46: "UNKNOWN_FUNCTION",
    62: "SYNTAX_ERROR",
    73: "UNKNOWN_FORMAT",
    80: "INCORRECT_QUERY",
    115: "UNKNOWN_SETTING",
    452: "SETTING_CONSTRAINT_VIOLATION",
    48: "NOT_IMPLEMENTED",
    344: "SUPPORT_IS_DISABLED",
    36: "BAD_ARGUMENTS",
}
SCHEMA_CODES: dict[int, str] = {
    8: "THERE_IS_NO_COLUMN",
    10: "NOT_FOUND_COLUMN_IN_BLOCK",
    15: "DUPLICATE_COLUMN",
    16: "NO_SUCH_COLUMN_IN_TABLE",
    20: "NUMBER_OF_COLUMNS_DOESNT_MATCH",
    47: "UNKNOWN_IDENTIFIER",
    60: "UNKNOWN_TABLE",
    81: "UNKNOWN_DATABASE",
    50: "UNKNOWN_TYPE",
    44: "ILLEGAL_COLUMN",
}
AUTH_CODES: dict[int, str] = {
    164: "READONLY",
    192: "UNKNOWN_USER",
    193: "WRONG_PASSWORD",
    194: "REQUIRED_PASSWORD",
    195: "IP_ADDRESS_NOT_ALLOWED",
    291: "DATABASE_ACCESS_DENIED",
    497: "ACCESS_DENIED",
    516: "AUTHENTICATION_FAILED",
}
TYPE_CODES: dict[int, str] = {
    6: "CANNOT_PARSE_TEXT",
    27: "CANNOT_PARSE_INPUT_ASSERTION_FAILED",
    38: "CANNOT_PARSE_DATE",
    41: "CANNOT_PARSE_DATETIME",
    43: "ILLEGAL_TYPE_OF_ARGUMENT",
    53: "TYPE_MISMATCH",
    69: "ARGUMENT_OUT_OF_BOUND",
    70: "CANNOT_CONVERT_TYPE",
    72: "CANNOT_PARSE_NUMBER",
    117: "INCORRECT_DATA",
    131: "TOO_LARGE_STRING_SIZE",
    190: "SIZES_OF_ARRAYS_DONT_MATCH",
    321: "VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE",
    349: "CANNOT_INSERT_NULL_IN_ORDINARY_COLUMN",
    407: "DECIMAL_OVERFLOW",
    691: "UNKNOWN_ELEMENT_OF_ENUM",
    395: "FUNCTION_THROW_IF_VALUE_IS_NON_ZERO",
    469: "VIOLATED_CONSTRAINT",
}
FATAL_CODES: dict[int, str] = {**SYNTAX_CODES, **SCHEMA_CODES, **AUTH_CODES, **TYPE_CODES}
"""Every exception code that fails a batch at once; any other code is retried."""

RETRYABLE_EXAMPLES: dict[int, str] = {
    3: "UNEXPECTED_END_OF_FILE",
    159: "TIMEOUT_EXCEEDED",
    202: "TOO_MANY_SIMULTANEOUS_QUERIES",
    209: "SOCKET_TIMEOUT",
    210: "NETWORK_ERROR",
    241: "MEMORY_LIMIT_EXCEEDED",
    242: "TABLE_IS_READ_ONLY",
    252: "TOO_MANY_PARTS",
    285: "TOO_FEW_LIVE_REPLICAS",
    286: "UNSATISFIED_QUORUM_FOR_PREVIOUS_WRITE",
    319: "UNKNOWN_STATUS_OF_INSERT",
    439: "CANNOT_SCHEDULE_TASK",
    999: "KEEPER_EXCEPTION",
}
"""Codes seen on overloaded or partitioned clusters (documented; retried like any other)."""

_FATAL_STATUSES = frozenset({400, 401, 403, 404, 405, 411, 413, 414, 501})
_CODE_IN_TEXT = re.compile(r"\bCode:\s*(\d+)")
_STATUS_IN_TEXT = re.compile(r"HTTP status (\d{3})")

_CLIENT_ENCODING_ERRORS: tuple[type[BaseException], ...] = (
    ValueError,
    TypeError,
    OverflowError,
    AttributeError,
    KeyError,
    IndexError,
    UnicodeError,
    struct.error,
)


def code_of(exc: BaseException) -> int | None:
    """The ClickHouse exception code an error carries, if any."""
    code = getattr(exc, "code", None)
    if isinstance(code, int):
        return code
    match = _CODE_IN_TEXT.search(str(exc))
    return int(match.group(1)) if match else None


def classify_code(code: int) -> ErrorClass:
    """Fatal for syntax, schema, auth and type codes; retryable for every other code."""
    return ErrorClass.FATAL if code in FATAL_CODES else ErrorClass.RETRYABLE


def classify(exc: BaseException) -> ErrorClass:
    """The error class of anything a ClickHouse write or probe raised."""
    if isinstance(exc, SinkError):
        return exc.error_class
    if isinstance(exc, ch_exc.ClickHouseError):
        code = code_of(exc)
        if code is not None:
            return classify_code(code)
        if isinstance(exc, ch_exc.OperationalError):
            # transport failures (timeouts, resets, refused) and retried HTTP statuses
            return ErrorClass.RETRYABLE
        status = _STATUS_IN_TEXT.search(str(exc))
        if status is not None:
            fatal = int(status.group(1)) in _FATAL_STATUSES
            return ErrorClass.FATAL if fatal else ErrorClass.RETRYABLE
        if isinstance(exc, (ch_exc.ProgrammingError, ch_exc.NotSupportedError)):
            return ErrorClass.FATAL
        if isinstance(exc, ch_exc.DataError):
            return ErrorClass.FATAL
        return ErrorClass.RETRYABLE
    if isinstance(exc, (ConnectionError, TimeoutError, socket.timeout, OSError)):
        return ErrorClass.RETRYABLE
    if isinstance(exc, _CLIENT_ENCODING_ERRORS):
        return ErrorClass.FATAL
    return ErrorClass.RETRYABLE


def code_name(code: int) -> str:
    """The name of a ClickHouse exception code spate knows ('' for the others)."""
    return FATAL_CODES.get(code) or RETRYABLE_EXAMPLES.get(code) or ""


def to_sink_error(exc: BaseException, endpoint: str, action: str = "insert") -> SinkError:
    """A :class:`SinkError` naming the endpoint, the code and the class of ``exc``."""
    if isinstance(exc, SinkError):
        return exc
    error_class = classify(exc)
    code = code_of(exc)
    text = " ".join(str(exc).split())
    if len(text) > 500:
        text = text[:497] + "..."
    label = ""
    if code is not None:
        name = code_name(code)
        label = f" [code {code}{' ' + name if name else ''}]"
    reason = f"{action} on {endpoint} failed{label}: {type(exc).__name__}: {text}"
    return SinkError(reason, error_class)
