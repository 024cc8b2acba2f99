"""The commit gates' registry is an explicit object, never process state (B231, B157).

Gates built from one :class:`~spate.sink.writebehind.CommitGates` for one destination
share a lock; gates of two registries share nothing; the gate classes keep no mutable
state of their own at class or module level.
"""

from __future__ import annotations

import threading
import uuid

import pytest
from spate._context import BuildContext
from spate.errors import SinkError
from spate.sink import _gate, writebehind
from spate.sink.writebehind import CommitGate, CommitGates
from spate.testing.conformance import conformance_context


def test_b231_gates_of_one_registry_share_a_lock_per_destination() -> None:
    gates = CommitGates()
    destination = f"lake-{uuid.uuid4().hex}"
    holder = gates.gate(destination, timeout=0.0)
    assert holder.acquire(0.0)
    try:
        other = CommitGate(destination, 0.0, gates=gates, when_held="retry")
        with pytest.raises(SinkError, match=destination):
            other.run(lambda: None)
        assert gates.gate(f"{destination}-b", 0.0, when_held="retry").run(lambda: 1) == 1
    finally:
        holder.release()
    assert len(gates) == 2


def test_b231_gates_of_two_registries_share_nothing() -> None:
    """Two pipelines given registries of their own (the default) do not wait for each
    other; the state lives in the registry object, not in the class or the module."""
    destination = f"lake-{uuid.uuid4().hex}"
    first, second = CommitGates(), CommitGates()
    holder = first.gate(destination, timeout=0.0)
    assert holder.acquire(0.0)
    try:
        assert second.gate(destination, 0.0, when_held="retry").run(lambda: "free") == "free"
    finally:
        holder.release()
    assert len(first) == len(second) == 1


def test_b231_no_gate_state_lives_in_a_class_or_a_module() -> None:
    mutable = (dict, list, set, type(threading.Lock()))
    for owner in (CommitGate, CommitGates, _gate, writebehind):
        held = [
            name
            for name, value in vars(owner).items()
            if isinstance(value, mutable) and not name.startswith("__")
        ]
        assert not held, f"{owner.__name__} holds mutable state: {held}"


def test_b231_each_build_context_brings_a_registry_unless_given_one() -> None:
    gates = CommitGates()
    shared = [conformance_context(f"s{i}", commit_gates=gates) for i in range(2)]
    assert all(c.commit_gates is gates for c in shared)
    alone = conformance_context("alone")
    assert isinstance(alone, BuildContext) and alone.commit_gates is not gates
