"""A writer schema compiled for the datum scanner of the columnar path (B110).

Owns the translation of a parsed (fastavro) Avro schema into the flat program of ints the
compiled scanner (``spate_avro_native``, Rust) walks, and the minimum encoded size of each
node, which is how the scanner tells that an array or map block declares more items than
its bytes can hold. Does not own the scan itself nor what the columnar decoder does with
the datums it refuses (``spate_avro._columnar``).

The program is a list of nodes, node 0 the root, each an opcode and its arguments (the
table is in the scanner's documentation). A named type is compiled once and every
reference to it is its node index, so recursive schemas are jumps. Logical types are
scanned as their underlying type.

The scanner is switched off for a decoder built while ``SPATE_AVRO_SCAN=0`` is set: a
test and diagnostic switch (it proves the crash-only recovery of B98 behind the scan),
never a production setting.
"""

from __future__ import annotations

import os
from typing import Any

SCAN_ENV = "SPATE_AVRO_SCAN"
"""Set to ``0`` to build columnar decoders without the datum scan (tests, diagnostics)."""

_PRIMITIVES = {
    "null": 0,
    "boolean": 1,
    "int": 2,
    "long": 3,
    "float": 4,
    "double": 5,
    "bytes": 6,
    "string": 7,
}
_FIXED, _ENUM, _ARRAY, _MAP, _UNION, _RECORD = 8, 9, 10, 11, 12, 13
_LEAST = {0: 0, 1: 1, 2: 1, 3: 1, 4: 4, 5: 8, 6: 1, 7: 1, _ENUM: 1, _ARRAY: 1, _MAP: 1}
"""Minimum encoded size of the nodes whose size does not depend on other nodes."""


def scan_enabled() -> bool:
    """Whether decoders built now scan their batches (see the module docstring)."""
    return os.environ.get(SCAN_ENV, "1") != "0"


class _Compiler:
    def __init__(self, named: dict[str, Any]) -> None:
        self.ops: list[int] = []
        self.nodes: list[int] = []
        self.names: dict[str, int] = {}
        self.named = named
        """fastavro's named schemas, for a reference met before its definition."""

    def node(self, schema: Any) -> int:
        if isinstance(schema, str):
            if schema in _PRIMITIVES:
                return self._emit(_PRIMITIVES[schema])
            if schema in self.names:
                return self.names[schema]
            if schema in self.named:
                return self.node(self.named[schema])
            raise ValueError(f"unknown Avro type {schema!r}")
        if isinstance(schema, list):
            at = self._emit(_UNION, len(schema), *([0] * len(schema)))
            for i, branch in enumerate(schema):
                self.ops[at + 2 + i] = self.node(branch)
            return at
        kind = schema["type"]
        if not isinstance(kind, str) or kind in _PRIMITIVES:
            return self.node(kind)  # a nested type, or a primitive with a logical type
        name = schema.get("name")
        if name is not None and name in self.names:
            return self.names[name]
        if kind == "fixed":
            return self._named(name, self._emit(_FIXED, int(schema["size"])))
        if kind == "enum":
            return self._named(name, self._emit(_ENUM, len(schema["symbols"])))
        if kind == "array":
            at = self._emit(_ARRAY, 0, 0)
            self.ops[at + 1] = self.node(schema["items"])
            return at
        if kind == "map":
            at = self._emit(_MAP, 0, 0)
            self.ops[at + 1] = self.node(schema["values"])
            return at
        if kind in ("record", "error"):
            fields = schema["fields"]
            at = self._named(name, self._emit(_RECORD, len(fields), *([0] * len(fields))))
            for i, field in enumerate(fields):
                self.ops[at + 2 + i] = self.node(field["type"])
            return at
        return self.node(kind)

    def _emit(self, *ops: int) -> int:
        at = len(self.ops)
        self.ops.extend(ops)
        self.nodes.append(at)
        return at

    def _named(self, name: str | None, at: int) -> int:
        if name is not None:
            self.names[name] = at
        return at

    def minimums(self) -> dict[int, int]:
        """The minimum encoded size of every node: a least fixed point from zero, so
        every step is a lower bound (enough passes for any chain of references)."""
        ops = self.ops
        least = dict.fromkeys(self.nodes, 0)
        for _ in range(len(self.nodes) + 1):
            changed = False
            for at in self.nodes:
                op = ops[at]
                if op in _LEAST:
                    value = _LEAST[op]
                elif op == _FIXED:
                    value = ops[at + 1]
                else:
                    refs = ops[at + 2 : at + 2 + ops[at + 1]]
                    if op == _UNION:
                        value = 1 + min((least[r] for r in refs), default=0)
                    else:
                        value = sum(least[r] for r in refs)
                value = min(value, 1 << 32)  # a record that can only hold itself
                if value != least[at]:
                    least[at] = value
                    changed = True
            if not changed:
                break
        return least


def compile_schema(
    schema: Any, lead_int: bool = False, named: dict[str, Any] | None = None
) -> list[int]:
    """The scanner program of a parsed writer schema (``lead_int``: the datums start with
    an ``int``, the union branch index of a top-level union's branch reader; ``named``:
    the named types of the whole schema, for a branch of it)."""
    if named is None:
        named = schema.get("__named_schemas", {}) if isinstance(schema, dict) else {}
    compiler = _Compiler(named or {})
    if lead_int:
        root = compiler._emit(_RECORD, 2, 0, 0)
        compiler.ops[root + 2] = compiler.node("int")
        compiler.ops[root + 3] = compiler.node(schema)
    else:
        compiler.node(schema)
    least = compiler.minimums()
    ops = compiler.ops
    for at in compiler.nodes:
        if ops[at] == _ARRAY:
            ops[at + 2] = least[ops[at + 1]]
        elif ops[at] == _MAP:
            ops[at + 2] = 1 + least[ops[at + 1]]  # the key's length, then the value
    return ops


def unbounded_for_fastavro(program: list[int]) -> bool:
    """Whether fastavro could spend unbounded memory or stack on a corrupt datum of the
    program's schema: it reads items of zero size one by one whatever count a block
    declares, and recurses (a C stack overflow) as deep as a datum nests. Such datums
    are refused by the scan's limits; they must not be handed to fastavro either."""
    nodes = _node_starts(program)
    zero_sized = any(program[at] == _ARRAY and program[at + 2] == 0 for at in nodes)
    return zero_sized or _recursive(program, nodes)


def may_abort(program: list[int]) -> bool:
    """Whether a datum of the program's schema can declare an item count: only a schema
    holding an array or a map can make the columnar reader reserve a corrupt count, and
    only a recursive one can nest without bound."""
    nodes = _node_starts(program)
    return any(program[at] in (_ARRAY, _MAP) for at in nodes) or _recursive(program, nodes)


def _node_starts(program: list[int]) -> list[int]:
    starts, at = [], 0
    while at < len(program):
        starts.append(at)
        op = program[at]
        if op in (_UNION, _RECORD):
            at += 2 + program[at + 1]
        elif op in (_ARRAY, _MAP):
            at += 3
        elif op in (_FIXED, _ENUM):
            at += 2
        else:
            at += 1
    return starts


def _refs(program: list[int], at: int) -> list[int]:
    """The nodes the node at ``at`` refers to: a union's branches, a record's fields, an
    array's items or a map's values."""
    op = program[at]
    if op in (_UNION, _RECORD):
        return program[at + 2 : at + 2 + program[at + 1]]
    if op in (_ARRAY, _MAP):
        return program[at + 1 : at + 2]
    return []


def _recursive(program: list[int], nodes: list[int]) -> bool:
    """Whether some node refers back to itself or to a node before it (a named type),
    through any kind of reference: a record can hold itself through an array alone."""
    return any(r <= at for at in nodes for r in _refs(program, at))
