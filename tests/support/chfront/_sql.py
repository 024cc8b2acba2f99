"""Just enough SQL lexing to split an HTTP request into statement and inline data.

ClickHouse's HTTP interface concatenates the ``query`` URL parameter, a newline and the
request body, and parses the statement from the front of that text. An INSERT carries its
rows after ``FORMAT <name>`` (the data starts after the newline that follows the format
name) or after ``VALUES``; everything after that point is data in the named format and may
be binary, so the lexer stops there and never looks at it. For other statements this module
finds the output ``FORMAT`` clause and the first keyword (which decides whether the
statement produces a result and whether a GET may run it).

String literals, quoted identifiers, comments and parentheses are skipped, so a column
called ``format`` or a setting value containing ``FORMAT`` is not mistaken for the clause.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from ._errors import SYNTAX_ERROR, ClickHouseError

_WORD = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")
_SPACE = b" \t\r\n\f\v"

# First keywords of statements that answer with a result set.
RESULT_KEYWORDS = frozenset({"SELECT", "WITH", "SHOW", "DESCRIBE", "DESC", "EXISTS", "EXPLAIN"})
# First keywords a GET request may run (GET implies readonly=2 on a real server).
READONLY_KEYWORDS = RESULT_KEYWORDS | {"SET", "USE", "CHECK"}

Kind = Literal["insert_data", "query"]


@dataclass(frozen=True, slots=True)
class Statement:
    """One request's statement.

    ``sql`` is the statement text to execute: for ``insert_data`` the INSERT without its
    ``FORMAT``/``VALUES`` part, for ``query`` the whole statement. ``fmt`` is the input format
    of ``data`` (insert) or the output format named in the statement (query, may be None).
    """

    kind: Kind
    keyword: str
    sql: str
    fmt: str | None
    data: memoryview | None = None

    @property
    def is_insert(self) -> bool:
        return self.keyword == "INSERT"

    @property
    def produces_result(self) -> bool:
        return self.kind == "query" and self.keyword in RESULT_KEYWORDS


def _skip_quoted(text: bytes, pos: int, quote: int) -> int:
    """Index just after the literal or quoted identifier opening at ``pos``."""
    i = pos + 1
    n = len(text)
    while i < n:
        c = text[i]
        if c == 0x5C:  # backslash escapes the next byte
            i += 2
            continue
        if c == quote:
            return i + 1
        i += 1
    return n


def _tokens(text: bytes) -> Iterator[tuple[int, int, str, int]]:
    """Yield ``(start, end, WORD, depth)`` for each bare word, skipping literals and comments.

    Lazy on purpose: the caller stops before inline data, which is never scanned.
    """
    i = 0
    n = len(text)
    depth = 0
    while i < n:
        c = text[i]
        if c in _SPACE:
            i += 1
        elif c in (0x27, 0x22, 0x60):  # ' " `
            i = _skip_quoted(text, i, c)
        elif text.startswith(b"--", i) or text.startswith(b"# ", i) or text.startswith(b"#!", i):
            end = text.find(b"\n", i)
            i = n if end < 0 else end + 1
        elif text.startswith(b"/*", i):
            end = text.find(b"*/", i + 2)
            i = n if end < 0 else end + 2
        elif c in (0x28, 0x5B):  # ( [
            depth += 1
            i += 1
        elif c in (0x29, 0x5D):  # ) ]
            depth = max(0, depth - 1)
            i += 1
        elif c == 0x5F or 0x41 <= c <= 0x5A or 0x61 <= c <= 0x7A:
            match = _WORD.match(text, i)
            assert match is not None  # the first byte is a word byte
            yield i, match.end(), match.group().decode("ascii").upper(), depth
            i = match.end()
        elif 0x30 <= c <= 0x39:
            # a number, including forms like 1e5 or 0x1F that contain letters
            i += 1
            while i < n and (text[i] == 0x5F or chr(text[i]).isalnum() or text[i] == 0x2E):
                i += 1
        else:
            i += 1


def _decode(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ClickHouseError.own(SYNTAX_ERROR, f"Query is not valid UTF-8: {exc}") from exc


def _data_start(text: bytes, pos: int) -> int:
    """Where inline data begins after the format name ending at ``pos``.

    Spaces and tabs are skipped, then one line break; nothing more, because binary data
    (Native with 10 columns starts with byte 0x0A) must stay intact.
    """
    n = len(text)
    while pos < n and text[pos] in b" \t":
        pos += 1
    if text.startswith(b"\r\n", pos):
        return pos + 2
    if pos < n and text[pos] == 0x0A:
        return pos + 1
    return pos


def parse_request(text: bytes) -> Statement:
    """Split the request text (``query`` parameter + newline + body) into a Statement."""
    tokens = _tokens(text)
    first = next(tokens, None)
    if first is None:
        raise ClickHouseError.own(SYNTAX_ERROR, "Empty query")
    keyword = first[2]
    if keyword == "INSERT":
        for start, end, word, depth in tokens:
            if depth:
                continue
            if word in ("SELECT", "WITH"):
                break
            if word == "VALUES":
                sql = _decode(text[:start]).strip()
                return Statement("insert_data", keyword, sql, "Values", memoryview(text)[end:])
            if word == "FORMAT":
                name = next(tokens, None)
                if name is None:
                    raise ClickHouseError.own(SYNTAX_ERROR, "Expected format name after FORMAT")
                input_format = _decode(text[name[0] : name[1]])
                sql = _decode(text[:start]).strip()
                data = memoryview(text)[_data_start(text, name[1]) :]
                return Statement("insert_data", keyword, sql, input_format, data)
    sql = _decode(text).strip().rstrip(";").rstrip()
    encoded = sql.encode()
    fmt: str | None = None
    previous: tuple[int, int, str, int] | None = None
    for token in _tokens(encoded):
        if previous is not None and previous[2] == "FORMAT" and previous[3] == 0 and token[3] == 0:
            fmt = encoded[token[0] : token[1]].decode()
        previous = token
    return Statement("query", keyword, sql, fmt)


def set_assignments(sql: str) -> list[tuple[str, str]]:
    """``SET a = 1, b = 'x'`` as ``[("a", "1"), ("b", "'x'")]`` (values kept as SQL text)."""
    body = sql.strip()
    if body[:3].upper() != "SET":
        raise ClickHouseError.own(SYNTAX_ERROR, f"Not a SET statement: {sql[:80]}")
    body = body[3:]
    parts: list[str] = []
    start = 0
    depth = 0
    i = 0
    raw = body.encode()
    while i < len(raw):
        c = raw[i]
        if c in (0x27, 0x22, 0x60):
            i = _skip_quoted(raw, i, c)
            continue
        if c in (0x28, 0x5B):
            depth += 1
        elif c in (0x29, 0x5D):
            depth -= 1
        elif c == 0x2C and depth == 0:
            parts.append(raw[start:i].decode())
            start = i + 1
        i += 1
    parts.append(raw[start:].decode())
    result: list[tuple[str, str]] = []
    for part in parts:
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ClickHouseError.own(SYNTAX_ERROR, f"Cannot parse SET assignment: {part.strip()}")
        result.append((name, value.strip()))
    return result
