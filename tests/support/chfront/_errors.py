"""ClickHouse-style errors of the HTTP front: exception codes, names and HTTP statuses.

Owns the one exception type every layer of the front raises (`ClickHouseError`), the
mapping from an exception code to the HTTP status a real server answers with, and the
error text in ClickHouse's own shape (``Code: N. DB::Exception: ... (NAME) (version ...)``).
The status table follows the server's documented behaviour (its
``exceptionCodeToHTTPStatus``); codes not listed there answer 500.
"""

from __future__ import annotations

import re

# Exception codes the front raises itself (numbers as in ClickHouse's ErrorCodes).
UNSUPPORTED_METHOD = 1
SYNTAX_ERROR = 62
UNKNOWN_FORMAT = 73
UNKNOWN_COMPRESSION_METHOD = 89
READONLY = 164
REQUIRED_PASSWORD = 194
CANNOT_DECOMPRESS = 271
CANNOT_SCHEDULE_TASK = 439
NOT_IMPLEMENTED = 48
AUTHENTICATION_FAILED = 516
STD_EXCEPTION = 1001

# Names of the codes above, for messages built before the engine is asked.
KNOWN_NAMES: dict[int, str] = {
    UNSUPPORTED_METHOD: "UNSUPPORTED_METHOD",
    SYNTAX_ERROR: "SYNTAX_ERROR",
    UNKNOWN_FORMAT: "UNKNOWN_FORMAT",
    UNKNOWN_COMPRESSION_METHOD: "UNKNOWN_COMPRESSION_METHOD",
    READONLY: "READONLY",
    REQUIRED_PASSWORD: "REQUIRED_PASSWORD",
    CANNOT_DECOMPRESS: "CANNOT_DECOMPRESS",
    CANNOT_SCHEDULE_TASK: "CANNOT_SCHEDULE_TASK",
    NOT_IMPLEMENTED: "NOT_IMPLEMENTED",
    AUTHENTICATION_FAILED: "AUTHENTICATION_FAILED",
    STD_EXCEPTION: "STD_EXCEPTION",
}

_UNAUTHORIZED = frozenset({"REQUIRED_PASSWORD"})
_FORBIDDEN = frozenset(
    {
        "UNKNOWN_USER",
        "WRONG_PASSWORD",
        "AUTHENTICATION_FAILED",
        "SET_NON_GRANTED_ROLE",
        "ACCESS_DENIED",
    }
)
_BAD_REQUEST = frozenset(
    {
        "BAD_ARGUMENTS",
        "CANNOT_COMPILE_REGEXP",
        "CANNOT_PARSE_TEXT",
        "CANNOT_PARSE_ESCAPE_SEQUENCE",
        "CANNOT_PARSE_QUOTED_STRING",
        "CANNOT_PARSE_DATE",
        "CANNOT_PARSE_DATETIME",
        "CANNOT_PARSE_NUMBER",
        "CANNOT_PARSE_DOMAIN_VALUE_FROM_STRING",
        "CANNOT_PARSE_IPV4",
        "CANNOT_PARSE_IPV6",
        "CANNOT_PARSE_INPUT_ASSERTION_FAILED",
        "CANNOT_PARSE_UUID",
        "DUPLICATE_COLUMN",
        "ILLEGAL_COLUMN",
        "UNKNOWN_ELEMENT_IN_AST",
        "UNKNOWN_TYPE_OF_AST_NODE",
        "THERE_IS_NO_COLUMN",
        "TOO_DEEP_AST",
        "TOO_BIG_AST",
        "UNEXPECTED_AST_STRUCTURE",
        "SYNTAX_ERROR",
        "INCORRECT_DATA",
        "TYPE_MISMATCH",
        "VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE",
    }
)
_NOT_FOUND = frozenset(
    {
        "UNKNOWN_TABLE",
        "UNKNOWN_FUNCTION",
        "UNKNOWN_IDENTIFIER",
        "UNKNOWN_TYPE",
        "UNKNOWN_STORAGE",
        "UNKNOWN_DATABASE",
        "UNKNOWN_SETTING",
        "UNKNOWN_DIRECTION_OF_SORTING",
        "UNKNOWN_AGGREGATE_FUNCTION",
        "UNKNOWN_FORMAT",
        "UNKNOWN_DATABASE_ENGINE",
        "UNKNOWN_TYPE_OF_QUERY",
        "UNKNOWN_ROLE",
    }
)
_OTHER: dict[str, int] = {
    "QUERY_IS_TOO_LARGE": 413,
    "NOT_IMPLEMENTED": 501,
    "SOCKET_TIMEOUT": 503,
    "CANNOT_OPEN_FILE": 503,
    "CANNOT_SCHEDULE_TASK": 503,
    "HTTP_LENGTH_REQUIRED": 411,
    "TIMEOUT_EXCEEDED": 408,
    "UNSUPPORTED_MEDIA_TYPE": 415,
}

_CODE_RE = re.compile(r"Code: (\d+)\. (.*)", re.DOTALL)
_NAME_RE = re.compile(r"\(([A-Z][A-Z0-9_]+)\)\s*$")


def http_status_for(name: str) -> int:
    """The HTTP status a ClickHouse server answers for an exception named ``name``."""
    if name in _UNAUTHORIZED:
        return 401
    if name in _FORBIDDEN:
        return 403
    if name in _BAD_REQUEST:
        return 400
    if name in _NOT_FOUND:
        return 404
    return _OTHER.get(name, 500)


class ClickHouseError(Exception):
    """An error answered in ClickHouse's HTTP shape.

    ``text`` is the message after ``DB::Exception:`` without the trailing ``(NAME)``;
    ``status`` defaults to the server's mapping for ``name`` and may be forced (faults).
    """

    def __init__(self, code: int, name: str, text: str, status: int | None = None) -> None:
        super().__init__(f"Code: {code}. DB::Exception: {text}. ({name})")
        self.code = code
        self.name = name
        self.text = text
        self.status = http_status_for(name) if status is None else status

    def body(self, version: str) -> bytes:
        """The response body a real server sends for this error."""
        return (
            f"Code: {self.code}. DB::Exception: {self.text}. ({self.name}) "
            f"(version {version} (official build))\n"
        ).encode()

    @classmethod
    def own(cls, code: int, text: str, status: int | None = None) -> ClickHouseError:
        """An error raised by the front itself, named from ``KNOWN_NAMES``."""
        return cls(code, KNOWN_NAMES.get(code, "UNKNOWN_EXCEPTION"), text, status)

    @classmethod
    def from_engine(cls, message: str) -> ClickHouseError:
        """Parse an engine exception message (``... Code: N. DB::Exception: text. (NAME)``)."""
        match = _CODE_RE.search(message)
        if match is None:
            return cls(STD_EXCEPTION, "STD_EXCEPTION", message.strip().rstrip("."))
        code = int(match.group(1))
        rest = match.group(2).strip()
        rest = rest.removeprefix("DB::Exception:").strip()
        name_match = _NAME_RE.search(rest)
        name = name_match.group(1) if name_match else "UNKNOWN_EXCEPTION"
        if name_match:
            rest = rest[: name_match.start()].rstrip()
        return cls(code, name, rest.rstrip("."))
