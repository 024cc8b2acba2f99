"""ClickHouse type names: parsing, canonical spelling and agreement between two spellings.

Owns the grammar of the type names that ``system.columns`` reports and that users declare
in ``columns:`` (``Nullable(Decimal(9, 2))``, ``Map(LowCardinality(String), Array(UInt8))``,
``Enum8('red' = 1)``, ``Tuple(a Int32, b String)``, ``DateTime64(3, 'UTC')``). A parsed
:class:`ChType` prints itself in the canonical form ClickHouse uses (``Decimal32(2)`` is
``Decimal(9, 2)``), so two spellings of one type compare equal. It does not know Python
values: turning a value into something a column accepts is :mod:`spate_clickhouse._coerce`.

Upholds B20 (a mistyped column is recognised, with both spellings named).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_TOKEN = re.compile(
    r"\s*(?:(?P<quoted>'(?:[^'\\]|\\.)*')|(?P<number>-?\d+)|(?P<word>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*)"
    r"|(?P<ident>`(?:[^`\\]|\\.)*`)|(?P<punct>[(),=]))"
)

_PLAIN_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_DECIMAL_PRECISION = {"Decimal32": 9, "Decimal64": 18, "Decimal128": 38, "Decimal256": 76}
_ALIASES = {"Boolean": "Bool", "BOOL": "Bool", "BOOLEAN": "Bool"}


class TypeSyntaxError(ValueError):
    """A type name that does not parse."""


@dataclass(frozen=True, slots=True)
class EnumItem:
    """One ``'name' = value`` element of an ``Enum8``/``Enum16``."""

    name: str
    value: int

    def __str__(self) -> str:
        return f"{_quote(self.name)} = {self.value}"


@dataclass(frozen=True, slots=True)
class ChType:
    """A parsed ClickHouse type: a name and its arguments.

    Arguments are nested types, integers, quoted strings (time zones), enum items, or, for
    a named ``Tuple``, element types with ``field`` set to the element name.
    """

    name: str
    args: tuple[ChType | int | str | EnumItem, ...] = ()
    field: str | None = None

    def __str__(self) -> str:
        prefix = f"{self.field} " if self.field is not None else ""
        if not self.args and self.name not in ("Tuple",):
            return prefix + self.name
        rendered = ", ".join(_render_arg(a) for a in self.args)
        return f"{prefix}{self.name}({rendered})"

    @property
    def inner(self) -> ChType:
        """The first argument as a type (for ``Nullable``, ``LowCardinality``, ``Array``)."""
        arg = self.args[0]
        if not isinstance(arg, ChType):
            raise TypeError(f"{self} has no inner type")
        return arg

    def type_args(self) -> tuple[ChType, ...]:
        return tuple(a for a in self.args if isinstance(a, ChType))

    def unwrapped(self) -> ChType:
        """The type with ``LowCardinality`` and ``Nullable`` wrappers removed."""
        t = self
        while t.name in ("LowCardinality", "Nullable"):
            t = t.inner
        return t

    @property
    def nullable(self) -> bool:
        """Whether NULL is a value of the type (``Nullable``; ``Variant`` and ``Dynamic``
        hold NULL without a wrapper)."""
        t = self
        while t.name == "LowCardinality":
            t = t.inner
        return t.name in ("Nullable", "Variant", "Dynamic")


def _render_arg(arg: ChType | int | str | EnumItem) -> str:
    if isinstance(arg, str):
        return _quote(arg)
    return str(arg)


def _quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _unquote(token: str) -> str:
    body = token[1:-1]
    return re.sub(r"\\(.)", r"\1", body)


def parse_type(text: str) -> ChType:
    """Parse a ClickHouse type name into its canonical :class:`ChType`.

    Raises :class:`TypeSyntaxError` naming the text when it does not parse.
    """
    tokens = _tokenize(text)
    parser = _Parser(tokens, text)
    result = parser.type_()
    if parser.pos != len(tokens):
        raise TypeSyntaxError(f"unexpected {tokens[parser.pos][1]!r} in type {text!r}")
    return _canonical(result)


def _tokenize(text: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    pos = 0
    stripped = text.rstrip()
    while pos < len(stripped):
        match = _TOKEN.match(stripped, pos)
        if match is None or match.end() == pos:
            raise TypeSyntaxError(f"cannot parse type {text!r} at position {pos}")
        kind = match.lastgroup or ""
        tokens.append((kind, match.group(kind)))
        pos = match.end()
    if not tokens:
        raise TypeSyntaxError("empty type name")
    return tokens


class _Parser:
    def __init__(self, tokens: list[tuple[str, str]], text: str) -> None:
        self.tokens = tokens
        self.text = text
        self.pos = 0

    def _peek(self, offset: int = 0) -> tuple[str, str] | None:
        index = self.pos + offset
        return self.tokens[index] if index < len(self.tokens) else None

    def _take(self) -> tuple[str, str]:
        token = self._peek()
        if token is None:
            raise TypeSyntaxError(f"type {self.text!r} ends too early")
        self.pos += 1
        return token

    def type_(self) -> ChType:
        kind, word = self._take()
        if kind not in ("word", "ident"):
            raise TypeSyntaxError(f"expected a type name in {self.text!r}, got {word!r}")
        name = word.strip("`") if kind == "ident" else word
        # `name Type` inside a Tuple: an element name followed by its type.
        nxt = self._peek()
        if nxt is not None and nxt[0] in ("word", "ident"):
            element = self.type_()
            return ChType(element.name, element.args, field=name)
        args: list[ChType | int | str | EnumItem] = []
        if name == "JSON" and nxt is not None and nxt[1] == "(":
            self._take()
            return ChType(name, self._json_args())
        if nxt is not None and nxt[1] == "(":
            self._take()
            if self._peek() is not None and self._peek() == ("punct", ")"):
                self._take()
                return ChType(name, ())
            while True:
                args.append(self._arg())
                _, sep = self._take()
                if sep == ")":
                    break
                if sep != ",":
                    raise TypeSyntaxError(f"expected ',' or ')' in type {self.text!r}, got {sep!r}")
        return ChType(name, tuple(args))

    def _json_args(self) -> tuple[ChType, ...]:
        """The arguments of ``JSON(...)`` after its ``(``: typed paths (``a.b Int32``, a
        type whose ``field`` is the path), ``SKIP path`` and ``SKIP REGEXP '...'`` (a
        ``SKIP`` field naming the rest verbatim) and limits (``max_dynamic_paths = 10``, a
        field ``max_dynamic_paths =`` naming the number)."""
        args: list[ChType] = []
        if self._peek() == ("punct", ")"):
            self._take()
            return ()
        while True:
            kind, first = self._take()
            nxt = self._peek()
            if kind == "word" and first.upper() == "SKIP":
                rest: list[str] = []
                while self._peek() is not None and self._peek() not in (
                    ("punct", ","),
                    ("punct", ")"),
                ):
                    rest.append(self._take()[1])
                if not rest:
                    raise TypeSyntaxError(f"SKIP without a path in {self.text!r}")
                args.append(ChType(" ".join(rest), (), "SKIP"))
            elif nxt == ("punct", "="):
                self._take()
                _, number = self._take()
                args.append(ChType(number, (), f"{first} ="))
            elif kind in ("word", "ident"):
                element = self.type_()
                if kind == "ident" and _PLAIN_PATH.fullmatch(first[1:-1]):
                    first = first[1:-1]  # the server quotes a dotted path: `a.b` is a.b
                args.append(ChType(element.name, element.args, field=first))
            else:
                raise TypeSyntaxError(f"unexpected {first!r} in JSON type {self.text!r}")
            _, sep = self._take()
            if sep == ")":
                return tuple(args)
            if sep != ",":
                raise TypeSyntaxError(f"expected ',' or ')' in type {self.text!r}, got {sep!r}")

    def _arg(self) -> ChType | int | str | EnumItem:
        token = self._peek()
        if token is None:
            raise TypeSyntaxError(f"type {self.text!r} ends too early")
        kind, value = token
        if kind == "word" and self._peek(1) == ("punct", "="):  # Dynamic(max_types = 8)
            self._take()
            self._take()
            _, number = self._take()
            return ChType(number, (), f"{value} =")
        if kind == "number":
            self._take()
            return int(value)
        if kind == "quoted":
            self._take()
            nxt = self._peek()
            if nxt is not None and nxt[1] == "=":
                self._take()
                kind2, number = self._take()
                if kind2 != "number":
                    raise TypeSyntaxError(f"expected an enum value in {self.text!r}")
                return EnumItem(_unquote(value), int(number))
            return _unquote(value)
        return self.type_()


def _canonical(t: ChType) -> ChType:
    name = _ALIASES.get(t.name, t.name)
    args = tuple(_canonical(a) if isinstance(a, ChType) else a for a in t.args)
    if name in _DECIMAL_PRECISION and len(args) == 1:
        return ChType("Decimal", (_DECIMAL_PRECISION[name], args[0]), t.field)
    if name == "Decimal" and len(args) == 1:
        return ChType("Decimal", (args[0], 0), t.field)
    if name == "Variant":  # the server names its types in order
        return ChType(name, tuple(sorted(args, key=str)), t.field)
    if name == "JSON":  # typed paths, skips and limits in one order
        return ChType(name, tuple(sorted(args, key=str)), t.field)
    if name == "Enum":
        width = "Enum8"
        if any(isinstance(a, EnumItem) and not -128 <= a.value <= 127 for a in args):
            width = "Enum16"
        return ChType(width, args, t.field)
    return ChType(name, args, t.field)


def types_agree(declared: ChType, actual: ChType) -> bool:
    """Whether a type declared in config matches the type a server reports.

    Equal canonical forms agree. A declared ``DateTime``/``DateTime64`` without a time
    zone agrees with the server's column in any zone (epoch values do not depend on it).
    """
    if declared.name != actual.name or declared.field != actual.field:
        return False
    if declared.name in ("DateTime", "DateTime64") and len(declared.args) < len(actual.args):
        return declared.args == actual.args[: len(declared.args)]
    if len(declared.args) != len(actual.args):
        return False
    for mine, theirs in zip(declared.args, actual.args, strict=True):
        if isinstance(mine, ChType) and isinstance(theirs, ChType):
            if not types_agree(mine, theirs):
                return False
        elif mine != theirs:
            return False
    return True
