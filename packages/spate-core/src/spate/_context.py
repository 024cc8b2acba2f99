"""What a factory gets besides its config: :class:`BuildContext`.

It lives here, below the plugin registry, because the layers under the registry read it
too: the sink pool takes its budget, nonce and threads from it and the conformance kit
builds one per test. :mod:`spate.plugins` (and :mod:`spate`) export it; this module sits
with :mod:`spate.sink` in the core's layering (it names the sink's
:class:`~spate.sink.RecordPosition`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from spate._clock import Clock
from spate.flow._contract import ByteBudget
from spate.metrics._meter import Meter
from spate.schema import Field, SchemaChanges
from spate.sink._gate import CommitGates
from spate.sink._intents import RecordPosition

__all__ = ["BuildContext"]


@dataclass(frozen=True, slots=True, kw_only=True)
class BuildContext:
    """What a factory gets besides its config: names, meter, clock and shared budget.

    ``component`` is the name the component's metrics and logs carry (``source``,
    ``deserializer`` or the sink's name). ``run_nonce`` is unique per process run (dedup
    tokens, B9). ``budget`` is the pipeline's in-flight byte budget (sinks count what
    they hold against it). ``io_threads`` is ``pipeline.io_threads``. ``coordination``
    is the configuration's top-level ``coordination`` section, undecoded (``None`` when
    absent), for sources that split work across instances; spate-coordination decodes it.
    """

    pipeline: str
    component: str
    meter: Meter
    clock: Clock
    run_nonce: str
    budget: ByteBudget
    io_threads: int = 2
    coordination: Mapping[str, object] | None = None
    record_fields: tuple[Field, ...] | None = None
    """For sinks: the fields of the records the deserializer produces, when it can say
    (:mod:`spate.schema`); a sink may create its table from them."""
    registry: object | None = None
    """The plugin registry the pipeline is assembled with, for factories that build
    nested connector sections (the ``tiered`` and ``tee`` sinks); None: the default one."""
    schema_changes: SchemaChanges | None = None
    """The pipeline's new writer schemas: the deserializer publishes, sinks that evolve
    their tables subscribe (:mod:`spate.schema`); None outside a pipeline."""
    delivery: str = "at_least_once"
    """``pipeline.delivery``: ``effectively_once`` asks sinks for per-lane blocks with
    recorded intents (B88); a sink that cannot keep them refuses to start."""
    position: RecordPosition | None = None
    """Under ``effectively_once``: the cell the chain sets to each record's offset."""
    replay_blocks: int = 0
    """Under ``effectively_once``: the blocks one partition may seal between a block's
    first write and its replay after a ``kill -9`` (B123); a sink whose window counts
    parts sizes each block's share of it by this (B345). 0: not known."""
    worker: tuple[int, int] | None = None
    """``(index, count)`` in worker process ``index`` of ``count`` (``spate run
    --processes``); None in a single process. Components that keep local state per
    process (a spool's directory, B114) keep it apart per worker."""
    commit_gates: CommitGates = field(default_factory=CommitGates)
    """The locks of the pipeline's commit gates (B231): windowed sinks build their
    :class:`~spate.sink.writebehind.CommitGate` from it, so every writer of one
    destination in the pipeline commits one at a time. The assembly gives every factory
    of a pipeline the same registry (a context built alone gets one of its own)."""

    sinks: Mapping[str, object] = field(default_factory=dict)
    """For sinks: the decoded sections of every sink under ``sinks:`` by name, for a
    sink that names another (the ClickHouse sink's ``late_data.to``); empty outside a
    pipeline."""
