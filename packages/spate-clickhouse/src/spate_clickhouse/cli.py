"""``spate schema ddl CONFIG [--sink NAME]``: print the ClickHouse sinks' ``CREATE TABLE``.

Registered through the ``spate.commands`` entry-point group. Loads the configuration,
builds its deserializer (in ``confluent`` mode that probes the registry and fetches the
``prewarm_subjects``, exactly as ``spate run`` would) to learn the records' fields, and
prints one statement per ClickHouse sink: the same statement ``create_table: if_missing``
runs at start-up; under ``pipeline.delivery: effectively_once`` also each sink's block
intent table (``state_table``), which the sinks create at start unless it exists (B88).
ClickHouse sinks nested in ``tiered`` terminals and ``tee`` branches (ADR 0005), at any
depth, are found too and named as their components are at run time
(``spooled.terminal``, ``both.0``) (B62). Exit codes as ``spate validate``: 0 printed, 2
configuration errors (one line naming the key or column), 1 a service the deserializer
needs is unreachable.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Mapping
from typing import Any

from spate import BuildContext, ConfigError, SpateError, SystemClock, load_config
from spate.config import ConnectorSpec, decode_connector
from spate.flow import InflightBudget
from spate.metrics import Meter
from spate.plugins import default_registry
from spate.schema import Field, branch_fields_of, record_fields_of

from spate_clickhouse._ddl import DdlError, create_table_sql
from spate_clickhouse._intents import state_table_sql
from spate_clickhouse.config import ClickHouseSinkConfig

Branches = Mapping[str, tuple[Field, ...]]


__all__ = ["SchemaCommand", "clickhouse_sinks"]


def _record_fields(config_path: str) -> tuple[object, tuple[Field, ...] | None, Branches | None]:
    config = load_config(config_path)
    fields = None
    branches = None
    if config.deserializer is not None:
        spec = config.deserializer
        factory = default_registry().factory(spec.kind, spec.tag, path=spec.path)
        name = config.pipeline.name
        context = BuildContext(
            pipeline=name,
            component=spec.component,
            meter=Meter(name),
            clock=SystemClock(),
            run_nonce="schema-ddl",
            budget=InflightBudget(1 << 30),
        )
        deserializer = factory.build(spec.config, context)
        try:
            fields = record_fields_of(deserializer)
            branches = branch_fields_of(deserializer) if fields is None else None
        finally:
            close = getattr(deserializer, "close", None)
            if callable(close):
                close()
    return config, fields, branches


def _branch_for(config: ClickHouseSinkConfig, branches: Branches) -> tuple[str, ...]:
    """The record types of a union that have every column of the sink whose type is not
    declared, with the same types; raises ``DdlError`` naming the real reason if none."""
    wanted = [
        spec.name
        for spec, entry in zip(config.column_specs, config.columns, strict=True)
        if not isinstance(entry, dict)
    ]
    having = [name for name, fields in branches.items() if set(wanted) <= {f.name for f in fields}]
    if not having:
        missing = "; ".join(
            f"{name.rsplit('.', 1)[-1]} lacks "
            + ", ".join(c for c in wanted if c not in {f.name for f in fields})
            for name, fields in branches.items()
        )
        raise DdlError(
            f"the records are a union of {len(branches)} record types and none has every "
            f"column of this sink ({missing}); declare the types of the columns the chain "
            f"computes, as {{column: Type}}"
        )
    types = {tuple(repr(f.type) for f in branches[name] if f.name in wanted) for name in having}
    if len(types) > 1:
        raise DdlError(
            f"the record types {', '.join(having)} all have this sink's columns, with "
            f"different types; declare the column types as {{column: Type}}"
        )
    return tuple(having)


def clickhouse_sinks(specs: Mapping[str, ConnectorSpec]) -> Iterator[tuple[str, ConnectorSpec]]:
    """``(component name, spec)`` of every ClickHouse sink, nested ones included (B62)."""
    for name, spec in specs.items():
        yield from _walk(name, spec)


def _walk(name: str, spec: ConnectorSpec) -> Iterator[tuple[str, ConnectorSpec]]:
    if spec.tag == "clickhouse":
        yield name, spec
        return
    config: Any = spec.config
    nested: list[tuple[str, str, Mapping[str, Any]]] = []
    if spec.tag == "tiered" and config is not None:
        nested.append((f"{name}.terminal", f"{spec.path}.terminal", config.terminal))
    elif spec.tag == "tee" and config is not None:
        nested += [
            (f"{name}.{i}", f"{spec.path}.sinks[{i}]", raw) for i, raw in enumerate(config.sinks)
        ]
    for component, path, raw in nested:
        if len(raw) != 1:
            continue  # refused by the configuration check already
        ((tag, body),) = raw.items()
        inner = ConnectorSpec(
            kind="sink", tag=tag, component=component, path=f"{path}.{tag}", body=body or {}
        )
        yield from _walk(component, decode_connector(inner, default_registry()))


class SchemaCommand:
    """``spate schema ddl CONFIG [--sink NAME]``."""

    help = "print CREATE TABLE statements derived from the deserializer's schema"

    @staticmethod
    def configure(parser: argparse.ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="schema_command", metavar="ACTION")
        sub.required = True
        ddl = sub.add_parser("ddl", help="CREATE TABLE for each ClickHouse sink")
        ddl.add_argument("config", help="pipeline configuration (YAML)")
        ddl.add_argument("--sink", metavar="NAME", help="only this sink")

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        try:
            config, fields, branches = _record_fields(args.config)
        except ConfigError as exc:
            sys.stderr.write(f"{exc}\n")
            return 2
        except SpateError as exc:
            sys.stderr.write(f"{exc}\n")
            return 1
        try:
            sinks = dict(clickhouse_sinks(config.sinks))  # type: ignore[attr-defined]
        except ConfigError as exc:
            sys.stderr.write(f"{exc}\n")
            return 2
        if args.sink is not None:
            if args.sink not in sinks:
                known = ", ".join(sorted(sinks)) or "none"
                sys.stderr.write(f"--sink: no ClickHouse sink {args.sink!r} (have: {known})\n")
                return 2
            sinks = {args.sink: sinks[args.sink]}
        statements = []
        configs: list[ClickHouseSinkConfig] = []
        for spec in sinks.values():
            config_ = spec.config
            if not isinstance(config_, ClickHouseSinkConfig):  # pragma: no cover - decoded
                raise TypeError(f"{spec.path}: not a ClickHouse sink section")
            configs.append(config_)
            described, of = fields, ""
            try:
                if described is None and branches:
                    having = _branch_for(config_, branches)
                    described, of = branches[having[0]], f" (records of {' or '.join(having)})"
                if config_.templated:
                    # Each target is created on first use as below, placeholders filled
                    # from the row (B291).
                    of += " (one table per target: {placeholders} filled from each row)"
                statements.append((of, create_table_sql(config_, described)))
            except DdlError as exc:
                sys.stderr.write(f"{spec.path}: {exc}\n")
                return 2
        for name, (of, statement) in zip(sinks, statements, strict=True):
            sys.stdout.write(f"-- sink {name}{of}\n{statement};\n\n")
        if config.pipeline.delivery == "effectively_once":  # type: ignore[attr-defined]
            states = {(c.database_name, c.state_table) for c in configs}
            for database, table in sorted(states):
                sys.stdout.write(
                    "-- block intents (pipeline.delivery: effectively_once)\n"
                    f"{state_table_sql(database, table)};\n\n"
                )
        return 0
