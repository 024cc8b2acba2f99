"""Start-up schema validation against ``system.columns`` on every replica (B20).

``validate_schema``:

* ``off`` — nothing is checked; the column types are still read from the first replica
  that answers (they drive the per-record checks and the Native encoding), unless every
  column declares its type in config;
* ``names`` — on every replica, every configured column exists in the table;
* ``full`` — also every column has the same type on every replica, agrees with the type
  declared in config (``Nullable``, ``Decimal`` precision and scale, ``DateTime64``
  precision, ``LowCardinality``, ``Array``, ``Map`` … all compared), and the first row the
  chain emits is checked against the types (:class:`~spate_clickhouse._encoder.RowEncoder`).

Each replica is checked when the pool probes it, before anything is consumed; a failure
is a fatal ``SinkError`` naming the replica, the column and both types. Owns the query and
the comparison, not the connection. A metadata column's type must suit what it holds, in
every mode (B253).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from spate.errors import ErrorClass, SinkError

from spate_clickhouse._meta import meta_type_problem
from spate_clickhouse._types import ChType, TypeSyntaxError, parse_type, types_agree
from spate_clickhouse.config import ColumnSpec

if TYPE_CHECKING:
    from clickhouse_connect.driver.client import Client

logger = logging.getLogger(__name__)

_COLUMNS_SQL = (
    "SELECT name, type FROM system.columns "
    "WHERE database = {db:String} AND table = {table:String} ORDER BY position"
)


def table_columns(client: Client, database: str, table: str) -> list[tuple[str, str]] | None:
    """``(name, type)`` of every column of ``database.table``, or None if it does not exist.

    An empty ``database`` means the client's current database.
    """
    if not database:
        database = str(client.command("SELECT currentDatabase()"))
    result = client.query(_COLUMNS_SQL, parameters={"db": database, "table": table})
    rows = [(str(name), str(type_name)) for name, type_name in result.result_rows]
    return rows or None


@dataclass
class SchemaCheck:
    """Checks replicas one by one and remembers what the first one reported.

    ``check(endpoint, columns)`` is called from each replica's probe with what that
    replica's ``system.columns`` holds; :attr:`types` then gives the column types the
    sink writes with.
    """

    mode: Literal["off", "names", "full"]
    table: str
    specs: Sequence[ColumnSpec]
    _reference: tuple[str, dict[str, ChType]] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def declared_types(self) -> dict[str, ChType] | None:
        """The declared types when every column declares one, else None."""
        if all(s.type is not None for s in self.specs):
            return {s.name: s.type for s in self.specs if s.type is not None}
        return None

    @property
    def needs_server(self) -> bool:
        """Whether a replica must be asked at all (always, unless ``off`` with all types)."""
        return self.mode != "off" or self.declared_types is None

    @property
    def types(self) -> dict[str, ChType] | None:
        """Column types to write with: the first replica's, else the declared ones."""
        with self._lock:
            if self._reference is not None:
                return dict(self._reference[1])
        return self.declared_types

    def check(self, endpoint: str, server: list[tuple[str, str]] | None) -> None:
        """Validate one replica's columns; raise a fatal ``SinkError`` listing problems."""
        if server is None:
            raise SinkError(f"table {self.table} does not exist on {endpoint}", ErrorClass.FATAL)
        found: dict[str, ChType] = {}
        for name, type_name in server:
            try:
                found[name] = parse_type(type_name)
            except TypeSyntaxError:
                logger.warning("cannot parse type %r of column %s on %s", type_name, name, endpoint)
                found[name] = ChType(type_name)
        problems: list[str] = []
        for spec in self.specs:
            actual = found.get(spec.name)
            if spec.meta is not None and actual is not None:
                problem = meta_type_problem(spec.name, spec.meta, actual)
                if problem is not None:
                    problems.append(f"{problem} (in {self.table} on {endpoint})")
        if self.mode != "off":
            missing = [s.name for s in self.specs if s.name not in found]
            if missing:
                problems.append(
                    f"column{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
                    f"not in {self.table} on {endpoint} (it has: {', '.join(found)})"
                )
        with self._lock:
            reference = self._reference
            if self.mode == "full":
                problems.extend(self._type_problems(endpoint, found, reference))
            if problems:
                raise SinkError("; ".join(problems), ErrorClass.FATAL)
            if reference is None:
                missing = [s.name for s in self.specs if s.name not in found and s.type is None]
                if missing:
                    raise SinkError(
                        f"cannot learn the type of column(s) {', '.join(missing)}: not in "
                        f"{self.table} on {endpoint}",
                        ErrorClass.FATAL,
                    )
                types = {
                    s.name: found.get(s.name, s.type)
                    for s in self.specs
                    if s.name in found or s.type is not None
                }
                self._reference = (endpoint, {k: v for k, v in types.items() if v is not None})

    def _type_problems(
        self,
        endpoint: str,
        found: dict[str, ChType],
        reference: tuple[str, dict[str, ChType]] | None,
    ) -> list[str]:
        problems: list[str] = []
        for spec in self.specs:
            actual = found.get(spec.name)
            if actual is None:
                continue
            if spec.type is not None and not types_agree(spec.type, actual):
                problems.append(
                    f"column {spec.name} is declared {spec.type} but is {actual} "
                    f"in {self.table} on {endpoint}"
                )
            if reference is not None:
                first_endpoint, first_types = reference
                theirs = first_types.get(spec.name)
                if theirs is not None and theirs != actual:
                    problems.append(
                        f"column {spec.name} is {actual} on {endpoint} but {theirs} "
                        f"on {first_endpoint}"
                    )
        return problems
