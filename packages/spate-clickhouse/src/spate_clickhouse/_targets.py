"""Templated targets: one sink writing each row to the table (and database) its values name.

``table: "events_{kind}"`` and ``database: "tenant_{$header.tenant}"`` are templates; each
``{placeholder}`` names a column of the sink — a field of the row (``{kind}``) or a
metadata column declared as ADR 0020 declares them (``{$header.tenant}`` is the column
``{tenant: $header.tenant}``). A row's target is the templates rendered with its values
(B290). This module owns the templates, their rendering and the checks; it does not own
batching or acks, which stay the pool's (ADR 0024):

* **placement** — :class:`TargetRouter` is the pool's :class:`~spate.sink.Router`: it
  renders every row's target as the row is offered (one row, or a source batch's rows)
  and raises ``SinkError(RECORD)`` for a row whose target cannot be named (a missing
  value, a name that is not an identifier), so ``on_record_error`` (skip, fail,
  dead_letter) applies to that record alone, named with its position (B292). It then
  places the row on a shard as the pool's own router would.
* **the columnar path** — :meth:`TargetPlan.refused` checks a prepared Arrow table's
  rows the same way, grouping equal values first (one rendering per distinct value,
  B296).
* **writing** — :meth:`TargetPlan.targets_of_columns` and
  :meth:`TargetPlan.targets_of_table` split a sealed batch by target at write time;
  each target gets its own ``INSERT`` whose token is the batch's token and the target
  (B294, B295). :class:`OpenTargets` remembers at most ``max_targets`` targets created
  or checked, least recently used forgotten (B293).
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, is_dataclass
from typing import TYPE_CHECKING, Any

from spate.errors import ErrorClass, SinkError
from spate.records import Lane, MetaSource
from spate.sink import Router, StartingRouter

if TYPE_CHECKING:
    from spate_clickhouse.config import ColumnSpec

_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
MAX_NAME = 128
"""Longest table or database name a template may render (characters)."""


def is_template(text: str) -> bool:
    """Whether ``text`` (a ``table:`` or ``database:`` value) has a placeholder."""
    return "{" in text or "}" in text


def valid_name(name: str) -> bool:
    """Whether ``name`` may name a table or database without quoting surprises."""
    return len(name) <= MAX_NAME and _IDENTIFIER.match(name) is not None


def render_value(value: object) -> str | None:
    """The text a placeholder takes from one value; None when it has none (a missing
    value, bytes that are not UTF-8). Both paths render through here (B296)."""
    if value is None:
        return None
    if isinstance(value, bytes | bytearray | memoryview):
        try:
            return bytes(value).decode()
        except UnicodeDecodeError:
            return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclass(frozen=True, slots=True)
class Template:
    """One template: literal texts around placeholders, each bound to a sink column."""

    text: str
    literals: tuple[str, ...]
    """``len(columns) + 1`` literal texts around the placeholders."""
    columns: tuple[int, ...]
    """The sink column (position) of each placeholder."""
    placeholders: tuple[str, ...]

    @classmethod
    def parse(cls, text: str, specs: Sequence[ColumnSpec]) -> Template:
        """Bind ``text``'s placeholders to ``specs``; ``ValueError`` naming a bad one."""
        literals: list[str] = []
        columns: list[int] = []
        placeholders: list[str] = []
        start = 0
        for match in _PLACEHOLDER.finditer(text):
            literals.append(text[start : match.start()])
            name = match.group(1).strip()
            columns.append(_column_of(name, specs))
            placeholders.append(name)
            start = match.end()
        literals.append(text[start:])
        if any("{" in part or "}" in part for part in literals):
            raise ValueError(f"unbalanced braces in {text!r}")
        if not columns:
            raise ValueError(f"{text!r} has no placeholder")
        return cls(text, tuple(literals), tuple(columns), tuple(placeholders))

    @classmethod
    def fixed(cls, text: str) -> Template:
        """A name without placeholders (the same for every row)."""
        return cls(text, (text,), (), ())

    def render(self, values: Sequence[object]) -> str:
        """The name for one row's column ``values``; ``SinkError(RECORD)`` if it has none."""
        if not self.columns:
            return self.text
        out = [self.literals[0]]
        for i, column in enumerate(self.columns):
            text = render_value(values[column])
            if text is None:
                raise SinkError(
                    f"target {self.text!r}: {{{self.placeholders[i]}}} has no value "
                    f"({_describe(values[column])})",
                    ErrorClass.RECORD,
                )
            out.append(text)
            out.append(self.literals[i + 1])
        name = "".join(out)
        if not valid_name(name):
            raise SinkError(
                f"target {self.text!r} renders {name[: MAX_NAME + 8]!r}, not a valid name "
                f"(letters, digits and _, not starting with a digit, at most {MAX_NAME})",
                ErrorClass.RECORD,
            )
        return name


def _describe(value: object) -> str:
    return "missing" if value is None else f"{type(value).__name__} that is not UTF-8"


def _column_of(name: str, specs: Sequence[ColumnSpec]) -> int:
    if name.startswith("$"):
        source = MetaSource.parse(name)  # ValueError names the known ones
        for position, spec in enumerate(specs):
            if spec.meta == source:
                return position
        raise ValueError(
            f"{{{name}}} needs a metadata column holding it: add {{<column>: {name}}} to columns"
        )
    for position, spec in enumerate(specs):
        if spec.name == name:
            return position
    raise ValueError(f"{{{name}}} is not one of the sink's columns ({[s.name for s in specs]})")


Target = tuple[str, str]
"""``(database, table)`` of one row ('' database: the user's default)."""


class TargetPlan:
    """The sink's ``database`` and ``table`` templates bound to its columns."""

    def __init__(self, database: str, table: str, specs: Sequence[ColumnSpec]) -> None:
        """``ValueError`` naming the template and the placeholder when one cannot bind."""
        self.database = (
            Template.parse(database, specs) if is_template(database) else Template.fixed(database)
        )
        self.table = Template.parse(table, specs) if is_template(table) else Template.fixed(table)
        self.names = tuple(s.name for s in specs)
        self.columns = tuple(sorted({*self.database.columns, *self.table.columns}))
        """Positions of the columns a target depends on."""

    def target(self, values: Sequence[object]) -> Target:
        """``(database, table)`` of a row given as all its column values."""
        return self.database.render(values), self.table.render(values)

    def row_values(self, row: object) -> Sequence[object]:
        """A row's column values, enough for :meth:`target` (missing ones as None)."""
        if isinstance(row, tuple) and hasattr(row, "_asdict"):
            row = row._asdict()
        elif is_dataclass(row) and not isinstance(row, type):
            row = {n: getattr(row, n, None) for n in self.names}
        if isinstance(row, Mapping):
            values: list[object] = [None] * len(self.names)
            for position in self.columns:
                values[position] = row.get(self.names[position])
            return values
        if isinstance(row, tuple | list):
            if len(row) < len(self.names):
                return [*row, *([None] * (len(self.names) - len(row)))]
            return row
        raise SinkError(
            f"a routed row must be a mapping, tuple or dataclass, got {type(row).__name__}",
            ErrorClass.RECORD,
        )

    def targets_of_columns(self, data: Sequence[Sequence[object]], rows: int) -> list[Target]:
        """The target of each row of encoded columns (the row path's buffer)."""
        width = len(self.names)
        out: list[Target] = []
        values: list[object] = [None] * width
        for row in range(rows):
            for position in self.columns:
                values[position] = data[position][row]
            out.append(self.target(values))
        return out

    def group_table(self, table: Any) -> list[tuple[Target, Any]]:
        """A prepared Arrow table split by target: ``[(target, indices), …]`` in the
        order targets first appear (vectorized: one rendering per distinct combination
        of the routing columns' values)."""
        codes, targets = self._codes(table)
        import numpy as np

        order = np.argsort(codes, kind="stable")
        sorted_codes = codes[order]
        bounds = np.flatnonzero(np.diff(sorted_codes)) + 1
        groups = np.split(order, bounds)
        result = [(targets[int(codes[group[0]])], group) for group in groups if len(group)]
        result.sort(key=lambda item: int(item[1][0]))
        return result

    def refused(self, table: Any) -> list[tuple[int, str]]:
        """Rows of an Arrow table whose target cannot be named, as ``(position, reason)``."""
        codes, targets = self._codes(table, raising=False)
        import numpy as np

        bad = [i for i, t in enumerate(targets) if isinstance(t, str)]
        if not bad:
            return []
        out: list[tuple[int, str]] = []
        for code in bad:
            reason = targets[code]
            out.extend((int(p), str(reason)) for p in np.flatnonzero(codes == code))
        out.sort()
        return out

    def _codes(self, table: Any, raising: bool = True) -> tuple[Any, list[Any]]:
        """Per row, the index of its target in a list of distinct targets (or, when not
        ``raising``, of the reason it has none)."""
        import numpy as np
        import pyarrow as pa

        rows = table.num_rows
        width = len(self.names)
        combined = np.zeros(rows, dtype=np.int64)
        dictionaries: list[tuple[int, list[object], int]] = []
        for position in self.columns:
            column = table.column(self.names[position])
            if isinstance(column, pa.ChunkedArray):
                column = column.combine_chunks()
            encoded = column.dictionary_encode()
            dictionary = encoded.dictionary.to_pylist()
            size = len(dictionary) + 1  # the last code is null
            indices = encoded.indices.fill_null(len(dictionary)).to_numpy(zero_copy_only=False)
            combined = combined * size + indices.astype(np.int64)
            dictionaries.append((position, dictionary, size))
        unique, inverse = np.unique(combined, return_inverse=True)
        targets: list[Any] = []
        values: list[object] = [None] * width
        for code in unique.tolist():
            for position, dictionary, size in reversed(dictionaries):
                index = code % size
                code //= size
                values[position] = dictionary[index] if index < len(dictionary) else None
            try:
                targets.append(self.target(values))
            except SinkError as exc:
                if raising:
                    raise
                targets.append(exc.reason)
        return inverse.reshape(-1), targets


class TargetRouter:
    """The pool's router for a templated sink: checks each row's target, then places the
    row on a shard with ``inner`` (the key or distributed router) or on the one shard."""

    def __init__(self, plan: TargetPlan, inner: Router | None) -> None:
        self._plan = plan
        self._inner = inner

    @property
    def placed_by(self) -> str | None:
        return self._inner.placed_by if self._inner is not None else None

    def start(self) -> None:
        if isinstance(self._inner, StartingRouter):
            self._inner.start()

    def route(self, row: object, key: bytes | None, lane: Lane) -> int:
        plan = self._plan
        plan.target(plan.row_values(row))  # SinkError(RECORD) when it has no target
        inner = self._inner
        return 0 if inner is None else inner.route(row, key, lane)

    def route_column(self, values: Sequence[object], lane: Lane) -> list[int]:
        # Frames are checked per row by the connector's prepare_frame (TargetPlan.refused).
        inner = self._inner
        return [0] * len(values) if inner is None else inner.route_column(values, lane)


class OpenTargets:
    """The targets made ready (created, or known to exist) lately: at most ``limit``,
    least recently used forgotten first (B293). Any worker thread."""

    def __init__(self, limit: int) -> None:
        self._limit = max(limit, 1)
        self._open: OrderedDict[tuple[str, ...], None] = OrderedDict()
        self._lock = threading.Lock()
        self.created = 0
        """Targets made ready so far (a forgotten one made ready again counts again)."""

    def use(self, target: tuple[str, ...], ready: Callable[[], None]) -> None:
        """Make ``target`` ready with ``ready`` (blocks; may raise ``SinkError``) unless it
        is open; mark it most recently used."""
        with self._lock:
            if target in self._open:
                self._open.move_to_end(target)
                return
        ready()
        with self._lock:
            self._open[target] = None
            self.created += 1
            while len(self._open) > self._limit:
                self._open.popitem(last=False)

    def __len__(self) -> int:
        return len(self._open)
