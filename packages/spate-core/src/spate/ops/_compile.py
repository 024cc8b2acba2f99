"""``compile_chain``: what the runtime calls to turn a chain description into a processor.

The runtime builds the sinks and the deserializer, calls the user's ``chains(ctx)``
(see :func:`spate.ops.build_chain`) and hands the result here. With no chain, decoded
records go straight to the single sink. The result implements
:class:`~spate.ops.BatchProcessor`: the generated loop by default, the reference
interpreter when ``interpreted=True`` (for debugging a chain; same behaviour, slower).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from spate.errors import ErrorPolicy
from spate.metrics._meter import Meter
from spate.ops._builder import Chain, ChainContext, ChainSpec, SinkTerminal, build_chain
from spate.ops._codegen import FusedChain
from spate.ops._contract import BatchProcessor
from spate.ops._deadletter import DeadLetter
from spate.ops._deser import Deserializer, ManyDeserializer
from spate.ops._interp import Interpreter
from spate.ops._stage import ChainRuntime
from spate.sink._contract import Sink


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
) -> BatchProcessor:
    """Compile ``chain`` against ``sinks`` into a :class:`BatchProcessor`.

    ``chain`` is the user's ``chains(ctx)`` function or what it returned (``None``:
    every decoded record goes to the single sink; several sinks then need a chain). ``deserializer``
    ``None`` hands the operators ``bytes`` copies of the payloads. ``deser_policy``
    defaults to the deserializer's ``on_error`` attribute (else ``skip``);
    ``record_policy`` (for rows a sink cannot encode) to each sink's
    ``on_record_error`` attribute (else ``fail``). Raises ``ValueError`` when the chain
    names a sink that does not exist. Called once, on the pipeline thread, at start.
    """
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
    elif callable(chain):
        spec = build_chain(chain, sinks)
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
    )
    if interpreted:
        return Interpreter(rt)
    return FusedChain(rt)
