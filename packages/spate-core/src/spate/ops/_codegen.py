"""The fused loop: Python source generated once per chain shape, exec'd, run per batch.

For a chain ``map(f) -> filter(g) -> sink`` the generated ``process`` is, in essence::

    for i in range(start, len(payloads)):
        key = keys[i]
        try:
            v = deser(payloads[i])
        except DeserError as exc:
            ...                              # not ready: stall; else record policy
        if v is NO_RECORD: ...
        n_in += 1
        try:
            v = f0(v)
        except Exception as exc:
            raise rt.op_fail(...)            # fail policy
        try:
            if not f1(v):
                d_filter += 1
                continue
        except Exception as exc: ...
        r = offer0(v, key, lane, ack)
        if r is REJECTED:
            return Stalled(Cursor(i + 1, (), ((0, v),)), ...)
        n_out[0] += 1

User functions and sink methods are bound as locals; there is no generator and no
per-operator call layer, only the user's own calls (docs/concepts/architecture.md and the
performance rules in docs/development.md). ``try`` costs nothing in CPython 3.11+
until something raises. Counters live in locals and reach the metric series once per
batch. flat_map becomes a nested ``for`` over the children, so a
stall inside it can name the children still to run (the cursor's frames). Every rare
path calls into :class:`~spate.ops._stage.ChainRuntime`, shared with the reference
interpreter, and resuming a half-done record is delegated to
:meth:`~spate.ops._interp.Interpreter.resume_pending` (B8). Equivalence with the
interpreter is checked by a property test (B3).

A sink that takes a source batch's rows at once (B95) is not called in the loop: its rows
and record indexes are appended to lists the loop binds as locals (``add0(v)``), and
:meth:`FusedChain.process` hands them over after the loop
(:meth:`~spate.ops._stage.ChainRuntime.offer_collected`).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from types import CodeType
from typing import Any

from spate.checkpoint._ack import AckToken
from spate.errors import DeserError, DeserErrorKind, ErrorPolicy, SinkError
from spate.ops._builder import StepKind
from spate.ops._contract import Stalled
from spate.ops._deser import NO_RECORD
from spate.ops._interp import Interpreter, as_cursor, has_not_ready
from spate.ops._split import RouteOut
from spate.ops._stage import DESER_FRAME, ChainRuntime, Collected, Cursor, HeldBatch
from spate.records import PayloadBatch, RecordMeta
from spate.sink._contract import Offer

logger = logging.getLogger(__name__)

ProcessFn = Callable[[PayloadBatch, AckToken, object | None, Collected | None], Stalled | None]


class _Writer:
    """Accumulates indented source lines."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def line(self, indent: int, text: str) -> None:
        self.lines.append("    " * indent + text)

    def source(self) -> str:
        return "\n".join(self.lines) + "\n"


def generate_source(rt: ChainRuntime) -> str:
    """The Python source of ``_make(env)`` → ``process(batch, ack, resume=None)``."""
    w = _Writer()
    nsinks = len(rt.offers)
    w.line(0, "def _make(env):")
    # Bind everything the loop touches from the closure environment.
    for name in (
        "rt",
        "deser",
        "deser_many",
        "resume_pending",
        "as_cursor",
        "has_not_ready",
        "DeserError",
        "NOT_READY",
        "NO_RECORD",
        "REJECTED",
        "SinkError",
        "Stalled",
        "Cursor",
        "RouteOut",
        "RecordMeta",
    ):
        w.line(1, f"_{name} = env[{name!r}]")
    for k in range(len(rt.steps)):
        w.line(1, f"_f{k} = env['fns'][{k}]")
    for s in range(nsinks):
        w.line(1, f"_o{s} = env['offers'][{s}]")
    w.line(1, "_offers = env['offers']")
    w.line(1, "_names = env['names']")
    w.line(1, "_route = env['route']")
    w.line(1, "_handle_index = env['handle_index']")
    w.line(1, "_position = env['position']")
    w.line(1, "_cell = env['cell']")
    w.line(0, "")
    w.line(1, "def process(batch, ack, resume=None, coll=None):")
    b = 2
    # Locals for the hot loop.
    for name in (
        "rt",
        "deser",
        "deser_many",
        "DeserError",
        "NOT_READY",
        "NO_RECORD",
        "REJECTED",
        "SinkError",
        "Stalled",
        "Cursor",
        "has_not_ready",
    ):
        w.line(b, f"{name} = _{name}")
    for k in range(len(rt.steps)):
        w.line(b, f"f{k} = _f{k}")
    for s in range(nsinks):
        w.line(b, f"o{s} = _o{s}")
    w.line(b, "offers = _offers")
    w.line(b, "names = _names")
    if rt.route is not None:
        w.line(b, "route = _route")
        w.line(b, "out = _RouteOut(_handle_index)")
        w.line(b, "buf = out.buf")
    for s in range(nsinks):
        if rt.batched[s]:
            # This sink takes the batch's rows at once (B95): collect them for the end.
            w.line(b, f"add{s}, rec{s} = coll[{s}][0].append, coll[{s}][1].append")
    if rt.route is not None and any(rt.batched):
        w.line(b, "apps = [None if c is None else (c[0].append, c[1].append) for c in coll]")
    if rt.takes_bytes:
        # Whole ``bytes`` values where the batch has them: no view per record.
        w.line(b, "payloads = batch.values")
        w.line(b, "if payloads is None:")
        w.line(b + 1, "payloads = batch.payloads")
    else:
        w.line(b, "payloads = batch.payloads")
    w.line(b, "keys = batch.keys")
    w.line(b, "lane = batch.lane")
    if rt.position is not None:
        w.line(b, "position = _position")
    if rt.holding:
        # A sink holds rows: it notes which record each came from (B111).
        w.line(b, "cell = _cell")
        w.line(b, "cell.batch = batch")
    if rt.with_meta or rt.position is not None:
        w.line(b, "offsets = batch.offsets")
    if rt.with_meta:
        w.line(b, "timestamps = batch.timestamps")
        w.line(b, "headers = batch.headers")
        w.line(b, "RecordMeta = _RecordMeta")
    w.line(b, "start = 0")
    w.line(b, "if resume is not None:")
    w.line(b + 1, "cursor = _as_cursor(resume)")
    w.line(b + 1, "stalled = _resume_pending(batch, ack, cursor)")
    w.line(b + 1, "if stalled is not None:")
    w.line(b + 2, "return stalled")
    w.line(b + 1, "start = cursor.next_index")
    if rt.dead_letter is not None:
        w.line(b, "if resume is None:")
        w.line(b + 1, "rt.dead_letter.seen(len(payloads))")
    w.line(b, "n_in = 0")
    w.line(b, f"outs = [0] * {nsinks}")
    w.line(b, "n_out = 0")
    w.line(b, "d_filter = 0")
    w.line(b, "d_fm_empty = 0")
    w.line(b, "d_empty = 0")
    w.line(b, "try:")
    t = b + 1
    w.line(t, "for i in range(start, len(payloads)):")
    L = t + 1
    w.line(L, "key = keys[i]")
    if rt.position is not None:
        w.line(L, "position.offset = offsets[i]")
    if rt.holding:
        w.line(L, "cell.index = i")
    w.line(L, "try:")
    if rt.many:
        w.line(L + 1, "items = deser_many(payloads[i])")
    else:
        w.line(L + 1, "v = deser(payloads[i])")
    w.line(L, "except DeserError as exc:")
    w.line(L + 1, "if exc.kind is NOT_READY:")
    w.line(L + 2, "return rt.not_ready(i)")
    w.line(L + 1, "st = rt.deser_error(exc, batch, i, ack)")
    w.line(L + 1, "if st is not None:")
    w.line(L + 2, "return st")
    w.line(L + 1, "continue")
    if rt.many:
        w.line(L, "if has_not_ready(items):")
        w.line(L + 1, "return rt.not_ready(i)")
        w.line(L, "for jd in range(len(items)):")
        D = L + 1
        w.line(D, "v = items[jd]")
        w.line(D, "if isinstance(v, DeserError):")
        w.line(D + 1, f"st = rt.deser_error(v, batch, i, ack, (({DESER_FRAME}, items, jd + 1),))")
        w.line(D + 1, "if st is not None:")
        w.line(D + 2, "return st")
        w.line(D + 1, "continue")
        w.line(D, "if v is NO_RECORD:")
        w.line(D + 1, "d_empty += 1")
        w.line(D + 1, "continue")
        w.line(D, "n_in += 1")
        if rt.with_meta:
            w.line(D, "v = (v, RecordMeta(lane, offsets[i], key, timestamps[i], headers[i]))")
        _gen_steps(w, rt, 0, D, [f"({DESER_FRAME}, items, jd + 1)"])
    else:
        w.line(L, "if v is NO_RECORD:")
        w.line(L + 1, "d_empty += 1")
        w.line(L + 1, "continue")
        w.line(L, "n_in += 1")
        if rt.with_meta:
            w.line(L, "v = (v, RecordMeta(lane, offsets[i], key, timestamps[i], headers[i]))")
        _gen_steps(w, rt, 0, L, [])
    w.line(b, "finally:")
    if rt.sink_index is not None:
        w.line(b + 1, f"outs[{rt.sink_index}] += n_out")
    w.line(b + 1, "rt.count_batch(n_in, outs, d_filter, d_fm_empty, d_empty)")
    w.line(b, "return None")
    w.line(0, "")
    w.line(1, "return process")
    return w.source()


def _frames_expr(frames: list[str]) -> str:
    """Frames innermost first; ``frames`` is given outermost first."""
    if not frames:
        return "()"
    return "(" + ", ".join(reversed(frames)) + ",)"


def _gen_steps(w: _Writer, rt: ChainRuntime, start: int, ind: int, frames: list[str]) -> None:
    """Emit the code for steps ``start..`` and the terminal on value ``v`` at ``ind``."""
    for k in range(start, len(rt.steps)):
        step = rt.steps[k]
        kind = step.kind
        recover = rt.step_policies[k] is not ErrorPolicy.FAIL
        w.line(ind, "try:")
        if kind is StepKind.MAP or kind is StepKind.TRY_MAP:
            w.line(ind + 1, f"v = f{k}(v)")
        elif kind is StepKind.FILTER:
            w.line(ind + 1, f"if not f{k}(v):")
            w.line(ind + 2, "d_filter += 1")
            w.line(ind + 2, "continue")
        elif kind is StepKind.INSPECT:
            w.line(ind + 1, f"f{k}(v)")
        else:
            w.line(ind + 1, f"c{k} = f{k}(v)")
            w.line(ind + 1, f"if type(c{k}) is not list:")
            w.line(ind + 2, f"c{k} = list(c{k})")
        w.line(ind, "except Exception as exc:")
        w.line(ind + 1, f"st = rt.op_error({k}, exc, batch, i, ack, {_frames_expr(frames)})")
        if recover:
            w.line(ind + 1, "if st is not None:")
            w.line(ind + 2, "return st")
            w.line(ind + 1, "continue")
        else:
            # op_error raises under the fail policy; this line is never reached.
            w.line(ind + 1, "raise")
        if kind is StepKind.FLAT_MAP:
            w.line(ind, f"if not c{k}:")
            w.line(ind + 1, "d_fm_empty += 1")
            w.line(ind + 1, "continue")
            w.line(ind, f"for j{k} in range(len(c{k})):")
            w.line(ind + 1, f"v = c{k}[j{k}]")
            _gen_steps(w, rt, k + 1, ind + 1, [*frames, f"({k + 1}, c{k}, j{k} + 1)"])
            return
    _gen_terminal(w, rt, ind, _frames_expr(frames))


def _gen_terminal(w: _Writer, rt: ChainRuntime, ind: int, frames: str) -> None:
    if rt.sink_index is not None and rt.batched[rt.sink_index]:
        s = rt.sink_index
        w.line(ind, f"add{s}(v)")
        w.line(ind, f"rec{s}(i)")
        return
    if rt.sink_index is not None:
        s = rt.sink_index
        w.line(ind, "try:")
        w.line(ind + 1, f"r = o{s}(v, key, lane, ack)")
        w.line(ind, "except SinkError as exc:")
        w.line(ind + 1, f"st = rt.sink_error({s}, exc, batch, i, ack, {frames})")
        w.line(ind + 1, "if st is not None:")
        w.line(ind + 2, "return st")
        w.line(ind + 1, "continue")
        w.line(ind, "if r is REJECTED:")
        w.line(
            ind + 1,
            f"return Stalled(Cursor(i + 1, {frames}, (({s}, v),)), 'sink_full', names[{s}])",
        )
        w.line(ind, "n_out += 1")
        return
    w.line(ind, "buf.clear()")
    w.line(ind, "try:")
    w.line(ind + 1, "route(v, out)")
    w.line(ind, "except Exception as exc:")
    w.line(ind + 1, "raise rt.route_error(exc, batch, i) from exc")
    w.line(ind, "if not buf:")
    w.line(ind + 1, "rt.unrouted_record(batch, i)")
    w.line(ind + 1, "continue")
    w.line(ind, "for e in range(len(buf)):")
    E = ind + 1
    w.line(E, "s, row = buf[e]")
    if any(rt.batched):
        w.line(E, "a = apps[s]")
        w.line(E, "if a is not None:")
        w.line(E + 1, "a[0](row)")
        w.line(E + 1, "a[1](i)")
        w.line(E + 1, "continue")
    w.line(E, "try:")
    w.line(E + 1, "r = offers[s](row, key, lane, ack)")
    w.line(E, "except SinkError as exc:")
    w.line(E + 1, f"st = rt.sink_error(s, exc, batch, i, ack, {frames}, tuple(buf[e + 1 :]))")
    w.line(E + 1, "if st is not None:")
    w.line(E + 2, "return st")
    w.line(E + 1, "continue")
    w.line(E, "if r is REJECTED:")
    w.line(
        E + 1,
        f"return Stalled(Cursor(i + 1, {frames}, tuple(buf[e:])), 'sink_full', names[s])",
    )
    w.line(E, "outs[s] += 1")


@functools.lru_cache(maxsize=256)
def _compile_shape(source: str) -> CodeType:
    """Compile generated source once per chain shape (the source depends only on it)."""
    return compile(source, "<spate fused chain>", "exec")


class FusedChain:
    """A chain compiled into one generated loop; implements ``BatchProcessor``."""

    def __init__(self, rt: ChainRuntime) -> None:
        self.rt = rt
        self.source = generate_source(rt)
        interp = Interpreter(rt)
        env: dict[str, Any] = {
            "rt": rt,
            "deser": rt.deser,
            "deser_many": rt.deser_many,
            "resume_pending": interp.resume_pending,
            "as_cursor": as_cursor,
            "has_not_ready": has_not_ready,
            "DeserError": DeserError,
            "NOT_READY": DeserErrorKind.NOT_READY,
            "NO_RECORD": NO_RECORD,
            "REJECTED": Offer.REJECTED,
            "SinkError": SinkError,
            "Stalled": Stalled,
            "Cursor": Cursor,
            "RouteOut": RouteOut,
            "RecordMeta": RecordMeta,
            "fns": tuple(step.fn for step in rt.steps),
            "offers": rt.offers,
            "names": rt.sink_names,
            "route": rt.route,
            "handle_index": rt.handle_index,
            "position": rt.position,
            "cell": rt.cell,
        }
        namespace: dict[str, Any] = {}
        exec(_compile_shape(self.source), namespace)
        self._process: ProcessFn = namespace["_make"](env)
        self._batched = any(rt.batched)
        logger.debug("compiled chain %s: %s", rt.component, rt.describe())

    def report_skips_due(self) -> None:
        """:class:`~spate.ops._contract.ReportsSkips`: the chain's skip logs (B42)."""
        self.rt.report_skips_due()

    def process(
        self, batch: PayloadBatch, ack: AckToken, resume: object | None = None
    ) -> Stalled | None:
        """Process ``batch`` from the start or from ``resume``. Runs on the pipeline thread.

        The rows of sinks that take a batch's rows at once are collected by the loop and
        offered after it (B95); a refusal stalls with them held, offered first on resume
        (B96).
        """
        rt = self.rt
        if resume.__class__ is HeldBatch:
            return rt.offer_held(resume, batch, ack)
        if not self._batched:
            return self._process(batch, ack, resume, None)
        collected: Collected = [([], []) if b else None for b in rt.batched]
        stalled = self._process(batch, ack, resume, collected)
        return rt.offer_collected(collected, batch, ack, stalled)
