"""``compile_chain``: what the runtime calls to turn a chain description into a processor.

The runtime builds the sinks and the deserializer, calls the user's ``chains(ctx)``
(see :func:`spate.ops.build_chain`) and hands the result here. With no chain, decoded
records go straight to the single sink. The result implements
:class:`~spate.ops.BatchProcessor`: the generated loop by default, the reference
interpreter when ``interpreted=True`` (for debugging a chain; same behaviour, slower).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from spate.checkpoint._ack import AckToken
from spate.errors import ErrorPolicy
from spate.metrics._meter import Meter
from spate.ops._builder import Chain, ChainContext, ChainSpec, SinkTerminal, build_chain
from spate.ops._codegen import FusedChain
from spate.ops._contract import BatchProcessor, Stalled
from spate.ops._deadletter import DeadLetter
from spate.ops._deser import Deserializer, ManyDeserializer, own_policy
from spate.ops._interp import Interpreter
from spate.ops._stage import ChainRuntime
from spate.records import PayloadBatch
from spate.sink._contract import Sink, decodes_columns, takes_frames
from spate.sink._intents import RecordPosition

if TYPE_CHECKING:
    from spate.ops._columnar import FrameProcessor

logger = logging.getLogger(__name__)


def compile_chain(
    chain: ChainSpec | Chain[Any] | Callable[[ChainContext], object] | None,
    *,
    deserializer: Deserializer | ManyDeserializer | None,
    sinks: Mapping[str, Sink],
    meter: Meter,
    pipeline: str,
    deser_policy: ErrorPolicy | None = None,
    record_policy: ErrorPolicy | None = None,
    component: str = "chain",
    deser_component: str = "deserializer",
    interpreted: bool = False,
    dead_letter: DeadLetter | None = None,
    position: RecordPosition | None = None,
) -> BatchProcessor:
    """Compile ``chain`` against ``sinks`` into a :class:`BatchProcessor`.

    ``chain`` is the user's ``chains(ctx)`` function or what it returned (``None``:
    every decoded record goes to the single sink; several sinks then need a chain). ``deserializer``
    ``None`` hands the operators ``bytes`` copies of the payloads. ``deser_policy``
    defaults to the deserializer's ``on_error`` attribute (else ``skip``);
    ``record_policy`` (for rows a sink cannot encode) to each sink's
    ``on_record_error`` attribute (else ``fail``). Raises ``ValueError`` when the chain
    names a sink that does not exist. Called once, on the pipeline thread, at start.
    ``position`` (effectively-once delivery, B88) is set to each record's offset before
    its rows are offered; on the columnar path, to the batch's offsets before its frames
    are offered (B145).
    """
    if callable(chain) and not isinstance(chain, (Chain, ChainSpec)):
        chain = build_chain(chain, sinks)  # the user's chains(ctx): a row or frame chain
    frames = _frame_spec(chain, deserializer, sinks, interpreted)
    if frames is not None:
        processor = _compile_frames(
            frames,
            deserializer=deserializer,
            sinks=sinks,
            meter=meter,
            pipeline=pipeline,
            deser_policy=deser_policy,
            record_policy=record_policy,
            component=component,
            deser_component=deser_component,
            dead_letter=dead_letter,
        )
        return processor if position is None else _BatchPositions(processor, position)
    if chain is None:
        if len(sinks) != 1:
            raise ValueError(
                "a chain is required when there are several sinks (split the records "
                "with ctx.chain().split().route(fn))"
            )
        spec = ChainSpec((), SinkTerminal(None))
    elif isinstance(chain, Chain):
        spec = chain.sink()
    elif isinstance(chain, ChainSpec):
        spec = chain
    else:
        raise TypeError(f"expected a chain, got {type(chain).__name__}")
    rt = ChainRuntime(
        spec,
        deserializer=deserializer,
        sinks=sinks,
        meter=meter,
        pipeline=pipeline,
        deser_policy=deser_policy,
        record_policy=record_policy,
        component=component,
        deser_component=deser_component,
        dead_letter=dead_letter,
        position=position,
    )
    if interpreted:
        return Interpreter(rt)
    return FusedChain(rt)


def columnar_capable(deserializer: object, sinks: Mapping[str, Sink]) -> bool:
    """Whether the no-chain pipeline can run columnar: a columnar deserializer and sinks
    that take frames (``spate[columnar]`` installed)."""
    if not decodes_columns(deserializer):
        return False
    if not all(takes_frames(s) for s in sinks.values()):
        return False
    try:
        import polars  # noqa: F401
    except ImportError:
        return False
    return True


def _frame_spec(
    chain: object, deserializer: object, sinks: Mapping[str, Sink], interpreted: bool
) -> Any:
    """The frame chain to run, or None for the row path.

    A user function is called once here; its result is kept for the row path too.
    """
    from spate.ops._frames import FrameChain, FrameRoute, FrameSpec, FrameSplit

    if chain is None:
        if len(sinks) == 1 and not interpreted and columnar_capable(deserializer, sinks):
            return FrameSpec((), (FrameRoute(None),))
        return None
    if isinstance(chain, FrameChain):
        return chain.sink()
    if isinstance(chain, FrameSplit):
        return chain.spec()
    if isinstance(chain, FrameSpec):
        return chain
    return None


def _compile_frames(
    spec: Any,
    *,
    deserializer: object,
    sinks: Mapping[str, Sink],
    meter: Meter,
    pipeline: str,
    deser_policy: ErrorPolicy | None,
    record_policy: ErrorPolicy | None,
    component: str,
    deser_component: str,
    dead_letter: DeadLetter | None,
) -> FrameProcessor:
    from spate.ops._builder import SplitTerminal
    from spate.ops._columnar import FrameProcessor

    if deser_policy is None:
        deser_policy = own_policy(deserializer)
    rt = ChainRuntime(  # counters and policies only: the frame path decodes by batch
        ChainSpec((), SplitTerminal(_no_route, spec.unrouted)),
        deserializer=None,
        sinks=sinks,
        meter=meter,
        pipeline=pipeline,
        deser_policy=deser_policy,
        record_policy=record_policy,
        component=component,
        deser_component=deser_component,
        dead_letter=dead_letter,
    )
    processor = FrameProcessor(spec, rt, deserializer, sinks)
    logger.info("pipeline %s runs on the columnar path: %s", pipeline, processor.describe())
    return processor


class _BatchPositions:
    """A frame processor under effectively once: the position cell holds each batch's
    offsets while its frames are offered, so the sinks place every row by its record's
    offset (B88, B145). A resumed batch sets them again."""

    __slots__ = ("_inner", "_position")

    def __init__(self, inner: FrameProcessor, position: RecordPosition) -> None:
        self._inner = inner
        self._position = position

    def process(
        self, batch: PayloadBatch, ack: AckToken, resume: object | None = None
    ) -> Stalled | None:
        self._position.offsets = batch.offsets
        return self._inner.process(batch, ack, resume)

    def describe(self) -> str:
        return self._inner.describe()

    def report_skips_due(self) -> None:
        self._inner.report_skips_due()


def _no_route(value: object, out: object) -> None:  # pragma: no cover - never called
    raise RuntimeError("frame chains route by branch and predicate")
