"""Frame chains: operators that receive a whole batch as a polars DataFrame (columnar path).

``ctx.frames()`` starts a :class:`FrameChain`; each operator takes and returns a
DataFrame: :meth:`FrameChain.select`, :meth:`FrameChain.with_columns`,
:meth:`FrameChain.filter` (polars expressions) and :meth:`FrameChain.map_batches` (a
user function). It ends in ``sink(name)`` or in ``split()`` whose routes pick rows by
union branch and/or predicate. The description runs nothing; :mod:`spate.ops._columnar`
executes it. Row operators (``map``, ``filter`` of a Python function, …) do not exist
here: calling one names the row path instead of silently mixing the two.
``ctx.frames(meta={"tenant": "$header.tenant", ...})`` starts the chain with the records'
metadata as columns (a ``with_meta`` operator, B259, ADR 0020).

This module imports no polars: expressions are kept as the opaque objects users pass.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from spate.errors import ErrorPolicy, PolicyLike, as_policy
from spate.ops._meta import RowMeta
from spate.records import MetaColumn, MetaSource
from spate.sink._held import RecordCell

FrameOpKind = Literal["select", "with_columns", "filter", "map_batches", "with_meta"]


@dataclass(frozen=True, slots=True)
class FrameOp:
    """One frame operator: its kind and its argument (expressions or a function)."""

    kind: FrameOpKind
    args: tuple[Any, ...]

    @property
    def label(self) -> str:
        if self.kind == "map_batches":
            fn = self.args[0]
            return f"map_batches({getattr(fn, '__qualname__', type(fn).__name__)})"
        if self.kind == "with_meta":
            return f"with_meta({', '.join(self.args[1])})"
        return f"{self.kind}({len(self.args)} expr)"


@dataclass(frozen=True, slots=True)
class FrameRoute:
    """Rows of ``branch`` (None: any) for which ``when`` holds (None: all) go to ``sink``
    after ``ops``."""

    sink: str | None
    branch: str | None = None
    when: Any = None
    ops: tuple[FrameOp, ...] = ()


@dataclass(frozen=True, slots=True)
class FrameSpec:
    """A complete frame chain: common operators, then one or more routes."""

    ops: tuple[FrameOp, ...]
    routes: tuple[FrameRoute, ...]
    unrouted: ErrorPolicy = ErrorPolicy.FAIL

    def describe(self) -> str:
        parts = [op.label for op in self.ops]
        routes = ", ".join(
            f"{r.branch or '*'}->{' -> '.join([*(o.label for o in r.ops), r.sink or ''])}"
            for r in self.routes
        )
        return " -> ".join([*parts, f"frames[{routes}]"])


_ROW_OPS = ("map", "try_map", "flat_map", "inspect")


class FrameChain:
    """An unfinished frame chain; every method returns a new chain (immutable)."""

    __slots__ = ("_ops",)

    def __init__(self, ops: tuple[FrameOp, ...] = ()) -> None:
        self._ops = ops

    @property
    def ops(self) -> tuple[FrameOp, ...]:
        return self._ops

    @classmethod
    def with_meta(cls, columns: Mapping[str, str]) -> FrameChain:
        """A chain whose first operator adds the records' metadata as columns
        (``{"tenant": "$header.tenant", "kafka_offset": "$offset"}``, B259); an unknown
        ``$name`` raises ``ValueError`` naming the known ones."""
        parsed = tuple(
            MetaColumn(name, MetaSource.parse(source), position)
            for position, (name, source) in enumerate(columns.items())
        )
        if not parsed:
            return cls()
        meta = RowMeta(parsed, RecordCell())
        return cls((FrameOp("with_meta", (meta, tuple(c.name for c in parsed))),))

    def _then(self, op: FrameOp) -> FrameChain:
        return FrameChain((*self._ops, op))

    def select(self, *exprs: Any) -> FrameChain:
        """``df.select(*exprs)`` on every batch."""
        return self._then(FrameOp("select", exprs))

    def with_columns(self, *exprs: Any) -> FrameChain:
        """``df.with_columns(*exprs)`` on every batch."""
        return self._then(FrameOp("with_columns", exprs))

    def filter(self, *predicates: Any) -> FrameChain:
        """Keep the rows where the polars predicates hold; the others are dropped,
        counted (reason ``filter``) and resolve as delivered (B3)."""
        return self._then(FrameOp("filter", predicates))

    def map_batches(self, fn: Callable[[Any], Any]) -> FrameChain:
        """``fn(df) -> df`` on every batch; an exception fails the pipeline naming the batch."""
        if not callable(fn):
            raise TypeError(f"map_batches() needs a callable, got {fn!r}")
        return self._then(FrameOp("map_batches", (fn,)))

    def __getattr__(self, name: str) -> Any:
        if name in _ROW_OPS:
            raise TypeError(
                f"{name}() is a row operator and this is a frame chain (ctx.frames()): use "
                "map_batches/with_columns, or a row chain (ctx.chain()) for per-record Python"
            )
        raise AttributeError(name)

    def sink(self, name: str | None = None) -> FrameSpec:
        """Send every row to sink ``name`` (may be omitted when there is one sink)."""
        return FrameSpec(self._ops, (FrameRoute(name),))

    def split(self, unrouted: PolicyLike = "fail") -> FrameSplit:
        """Route rows to sinks by union branch and/or predicate with :meth:`FrameSplit.route`."""
        return FrameSplit(self._ops, (), as_policy(unrouted, "split(unrouted=...)"))


class FrameSplit:
    """A frame chain ending in routes; add them with :meth:`route`. Usable as it is."""

    __slots__ = ("_ops", "_routes", "_unrouted")

    def __init__(
        self, ops: tuple[FrameOp, ...], routes: tuple[FrameRoute, ...], unrouted: ErrorPolicy
    ) -> None:
        self._ops = ops
        self._routes = routes
        self._unrouted = unrouted

    def route(
        self,
        sink: str,
        *,
        branch: str | None = None,
        when: Any = None,
        then: FrameChain | None = None,
    ) -> FrameSplit:
        """Rows of union ``branch`` (its name without namespace, or full name) for which
        the predicate ``when`` holds go to ``sink``, through ``then``'s operators.

        A row may match several routes (it goes to each); a row matching none follows
        ``unrouted`` (B3 when skipped).
        """
        ops = then.ops if then is not None else ()
        return FrameSplit(
            self._ops, (*self._routes, FrameRoute(sink, branch, when, ops)), self._unrouted
        )

    def spec(self) -> FrameSpec:
        if not self._routes:
            raise TypeError("the frame chain ends in split() without any route()")
        return FrameSpec(self._ops, self._routes, self._unrouted)
