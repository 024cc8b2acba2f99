"""The chain builder users write: ``ctx.chain().map(f).filter(g).sink("name")``.

This module owns the *description* of a chain: an immutable list of steps (``map``,
``try_map``, ``filter``, ``flat_map``, ``inspect``) and one terminal (``sink(name)`` or
``split(...).route(fn)``), plus the :class:`ChainContext` handed to the user's
``chains(ctx)`` function. It runs nothing: :func:`spate.ops.compile_chain` turns a
description into one fused loop (:mod:`spate.ops._codegen`) or, for reference, into
:mod:`spate.ops._interp`.

Error policies: an exception raised by an operator follows ``fail`` (the pipeline stops
with :class:`~spate.errors.FatalError`) unless the step is a ``try_map`` whose policy is
``skip`` (the record is dropped and counted, B3), or whose policy — the ``try_map``'s
own, else the chain's ``on_error`` (``ctx.chain(on_error=...)``) — is ``dead_letter``
(the record goes to the dead-letter sink with its error, B71). A split record that the
route function emits nowhere follows the split's ``unrouted`` policy, ``fail`` by default.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, Protocol, TypeVar

from spate.errors import ErrorPolicy, PolicyLike, as_policy

T = TypeVar("T")
U = TypeVar("U")


class StepKind(enum.Enum):
    MAP = "map"
    TRY_MAP = "try_map"
    FILTER = "filter"
    FLAT_MAP = "flat_map"
    INSPECT = "inspect"


@dataclass(frozen=True, slots=True)
class Step:
    """One operator of a chain: its kind, the user's function and its error policy."""

    kind: StepKind
    fn: Callable[[Any], Any]
    policy: ErrorPolicy = ErrorPolicy.FAIL

    @property
    def label(self) -> str:
        name = getattr(self.fn, "__qualname__", None) or type(self.fn).__name__
        return f"{self.kind.value}({name})"


@dataclass(frozen=True, slots=True)
class SinkHandle:
    """A named sink as the route function of a split sees it (from ``ctx.sink(name)``)."""

    name: str

    def __repr__(self) -> str:
        return f"SinkHandle({self.name!r})"


class Emitter(Protocol):
    """The ``out`` argument of a route function: ``out.emit(handle, row)``."""

    def emit(self, sink: SinkHandle, row: object) -> None:
        """Send ``row`` to ``sink``; may be called any number of times per record."""
        ...


RouteFn = Callable[[Any, Emitter], object]


@dataclass(frozen=True, slots=True)
class SinkTerminal:
    """Every output row goes to one sink (``None``: the only configured sink)."""

    name: str | None


@dataclass(frozen=True, slots=True)
class SplitTerminal:
    """A route function sends each value to any number of named sinks."""

    route: RouteFn
    unrouted: ErrorPolicy


Terminal = SinkTerminal | SplitTerminal


@dataclass(frozen=True, slots=True)
class ChainSpec:
    """A complete chain: steps and terminal. What ``chains(ctx)`` returns."""

    steps: tuple[Step, ...]
    terminal: Terminal
    with_meta: bool = False
    """The first operator receives ``(value, RecordMeta)`` pairs (``ctx.chain(meta=True)``)."""
    on_error: ErrorPolicy = ErrorPolicy.FAIL
    """What an exception of an operator other than ``try_map`` does: ``fail`` or
    ``dead_letter`` (``ctx.chain(on_error=...)``)."""

    def describe(self) -> str:
        """A one-line rendering for logs: ``map(parse) -> filter(ok) -> sink(events)``."""
        parts = [step.label for step in self.steps]
        if isinstance(self.terminal, SinkTerminal):
            parts.append(f"sink({self.terminal.name or ''})")
        else:
            route = getattr(self.terminal.route, "__qualname__", "route")
            parts.append(f"split({route})")
        return " -> ".join(parts)


class Chain(Generic[T]):
    """An unfinished chain; every method returns a new chain (the builder is immutable).

    Operators run on the pipeline thread, once per record, in a generated loop. A value
    must not keep the borrowed payload ``memoryview`` past its batch (copy with
    ``bytes(view)``).
    """

    __slots__ = ("_meta", "_on_error", "_steps")

    def __init__(
        self,
        steps: Sequence[Step] = (),
        *,
        meta: bool = False,
        on_error: ErrorPolicy = ErrorPolicy.FAIL,
    ) -> None:
        self._steps = tuple(steps)
        self._meta = meta
        self._on_error = on_error

    def _then(self, step: Step) -> Chain[Any]:
        if not callable(step.fn):
            raise TypeError(f"{step.kind.value}() needs a callable, got {step.fn!r}")
        return Chain((*self._steps, step), meta=self._meta, on_error=self._on_error)

    @property
    def steps(self) -> tuple[Step, ...]:
        return self._steps

    def map(self, fn: Callable[[T], U]) -> Chain[U]:
        """Replace each value by ``fn(value)``; an exception fails the pipeline."""
        return self._then(Step(StepKind.MAP, fn))

    def try_map(self, fn: Callable[[T], U], policy: PolicyLike = "skip") -> Chain[U]:
        """Like :meth:`map`, but an exception follows ``policy`` (skip: drop and count)."""
        return self._then(Step(StepKind.TRY_MAP, fn, as_policy(policy, "try_map")))

    def filter(self, predicate: Callable[[T], object]) -> Chain[T]:
        """Keep values for which ``predicate`` is true; the others are dropped and counted."""
        return self._then(Step(StepKind.FILTER, predicate))

    def flat_map(self, fn: Callable[[T], Iterable[U]]) -> Chain[U]:
        """Replace each value by every item of ``fn(value)`` (none: dropped and counted)."""
        return self._then(Step(StepKind.FLAT_MAP, fn))

    def inspect(self, fn: Callable[[T], object]) -> Chain[T]:
        """Call ``fn(value)`` for its side effect and pass the value on unchanged."""
        return self._then(Step(StepKind.INSPECT, fn))

    def sink(self, name: str | None = None) -> ChainSpec:
        """Send every value to sink ``name`` (may be omitted when there is one sink)."""
        if name is not None and not isinstance(name, str):
            raise TypeError(f"sink() takes a sink name, got {name!r}")
        return ChainSpec(self._steps, SinkTerminal(name), self._meta, self._on_error)

    def split(self, unrouted: PolicyLike = "fail") -> Split[T]:
        """Route each value to named sinks with :meth:`Split.route`.

        A value the route function emits nowhere follows ``unrouted``: ``fail`` (the
        default) stops the pipeline, ``skip`` drops and counts it (reason ``unrouted``).
        """
        return Split(
            self._steps,
            as_policy(unrouted, "split(unrouted=...)"),
            self._meta,
            self._on_error,
        )


class Split(Generic[T]):
    """A chain ending in a split; finish it with :meth:`route`."""

    __slots__ = ("_meta", "_on_error", "_steps", "_unrouted")

    def __init__(
        self,
        steps: tuple[Step, ...],
        unrouted: ErrorPolicy,
        meta: bool = False,
        on_error: ErrorPolicy = ErrorPolicy.FAIL,
    ) -> None:
        self._steps = steps
        self._unrouted = unrouted
        self._meta = meta
        self._on_error = on_error

    def route(self, fn: Callable[[T, Emitter], object]) -> ChainSpec:
        """``fn(value, out)`` calls ``out.emit(ctx.sink(name), row)`` for each output row."""
        if not callable(fn):
            raise TypeError(f"route() needs a callable, got {fn!r}")
        return ChainSpec(self._steps, SplitTerminal(fn, self._unrouted), self._meta, self._on_error)


class ChainContext:
    """What the user's ``chains(ctx)`` function receives.

    ``ctx.chain()`` starts a chain after the configured deserializer; ``ctx.sink(name)``
    returns the handle a split's route function emits to.
    """

    __slots__ = ("_sinks",)

    def __init__(self, sink_names: Iterable[str]) -> None:
        self._sinks = tuple(sink_names)

    @property
    def sinks(self) -> tuple[str, ...]:
        """The configured sink names."""
        return self._sinks

    def chain(
        self, *, meta: bool = False, on_error: Literal["fail", "dead_letter"] = "fail"
    ) -> Chain[Any]:
        """Start a chain; its first operator receives the deserializer's values.

        With ``meta=True`` it receives ``(value, meta)`` pairs instead, where ``meta`` is
        the record's :class:`~spate.records.RecordMeta` (lane, offset, key, timestamp) —
        for rows that carry the Kafka key, partition or offset. ``on_error`` is what an
        exception of an operator (other than a ``try_map``, which has its own policy)
        does: ``fail`` the pipeline, or send the record to the ``dead_letter`` sink.
        """
        policy = as_policy(on_error, "chain(on_error=...)")
        if policy is ErrorPolicy.SKIP:
            raise ValueError("chain(on_error=...): use try_map for skip; 'fail' or 'dead_letter'")
        return Chain(meta=meta, on_error=policy)

    def frames(self, meta: Mapping[str, str] | None = None) -> Any:
        """Start a frame chain (columnar path, ``spate[columnar]``): its operators receive
        each batch as a polars DataFrame (see :mod:`spate.ops._frames`).

        ``meta`` maps column names to record metadata (``$offset``, ``$partition``,
        ``$timestamp``, ``$timestamp_ms``, ``$topic``, ``$key``, ``$value``,
        ``$header.<name>``): each frame gets those columns before the first operator
        (B259)."""
        from spate.ops._frames import FrameChain

        return FrameChain.with_meta(meta or {})

    def sink(self, name: str) -> SinkHandle:
        """The handle of sink ``name``; an unknown name is an error listing the known ones."""
        if name not in self._sinks:
            known = ", ".join(repr(s) for s in self._sinks) or "none"
            raise ValueError(f"no sink named {name!r}; configured sinks: {known}")
        return SinkHandle(name)


def build_chain(chains: Callable[[ChainContext], object], sink_names: Iterable[str]) -> Any:
    """Call the user's ``chains(ctx)`` and check it returned a chain.

    An unfinished chain (no terminal) is accepted as ``.sink()``: all rows go to the
    single sink.
    """
    result = chains(ChainContext(sink_names))
    if isinstance(result, ChainSpec):
        return result
    if isinstance(result, Chain):
        return result.sink()
    if isinstance(result, Split):
        raise TypeError("the chain ends in split() without route(fn)")
    from spate.ops._frames import FrameChain, FrameSpec, FrameSplit

    if isinstance(result, FrameSpec):
        return result
    if isinstance(result, FrameChain):
        return result.sink()
    if isinstance(result, FrameSplit):
        return result.spec()
    raise TypeError(
        f"chains(ctx) must return a chain (ctx.chain()...sink() or ...split().route(fn)), "
        f"got {type(result).__name__}"
    )
