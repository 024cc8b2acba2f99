"""Deterministic storefront events: orders placed, payments captured, refunds issued.

The generator is seeded, so the same ``(seed, count)`` always yields the same events in
the same order, keyed by order id. Every order starts with an ``OrderPlaced`` (with one
to four order lines); most are then paid (``PaymentCaptured``) and a few of the paid
ones refunded (``RefundIssued``). Events of different orders interleave, as they would
in a real topic.

The :class:`Manifest` records what was generated (events per kind, the order ids of
each kind) so tests and the demo can compare a destination against it.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

EventKind = Literal["OrderPlaced", "PaymentCaptured", "RefundIssued", "WideEvent"]
KINDS: tuple[EventKind, ...] = ("OrderPlaced", "PaymentCaptured", "RefundIssued")
NAMESPACE = "spate.datagen"

_REGIONS = ("eu-west", "eu-central", "us-east", "us-west", "ap-south", "ap-east")
_REASONS = ("damaged", "late", "wrong-size", "changed-mind", "duplicate-charge")
_SKUS = tuple(f"SKU-{n:05d}" for n in range(500))
EPOCH_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


class StorefrontEvent(NamedTuple):
    """One event: its kind, the order it belongs to, and its Avro-shaped record."""

    kind: EventKind
    order_id: int
    record: dict[str, object]

    @property
    def key(self) -> bytes:
        return str(self.order_id).encode()

    @property
    def full_name(self) -> str:
        return f"{NAMESPACE}.{self.kind}"


@dataclass
class Manifest:
    """What a generator produced, per kind."""

    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    order_ids: dict[str, set[int]] = field(default_factory=lambda: {k: set() for k in KINDS})

    def add(self, event: StorefrontEvent) -> None:
        self.counts[event.kind] = self.counts.get(event.kind, 0) + 1
        self.order_ids.setdefault(event.kind, set()).add(event.order_id)

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def storefront_events(
    count: int,
    *,
    seed: int = 1,
    first_order_id: int = 1,
    pay_ratio: float = 0.9,
    refund_ratio: float = 0.1,
) -> Iterator[StorefrontEvent]:
    """Yield exactly ``count`` events, deterministically for a given ``seed``.

    Follow-up events (payment, refund) of an order come a little after the order, with
    other orders in between. The stream ends after ``count`` events even if some
    follow-ups were still due.
    """
    if count < 0:
        raise ValueError("count must not be negative")
    rng = random.Random(seed)
    next_order = first_order_id
    due: list[tuple[int, StorefrontEvent]] = []  # (emit at index, event), kept short
    emitted = 0
    while emitted < count:
        ready = next((i for i, (at, _e) in enumerate(due) if at <= emitted), None)
        if ready is not None:
            _at, event = due.pop(ready)
            yield event
            emitted += 1
            continue
        order_id = next_order
        next_order += 1
        lines: list[dict[str, Any]] = [
            {
                "sku": rng.choice(_SKUS),
                "qty": rng.randint(1, 5),
                "unit_cents": rng.randint(99, 25_000),
            }
            for _ in range(rng.randint(1, 4))
        ]
        total = sum(int(line["qty"]) * int(line["unit_cents"]) for line in lines)
        placed = StorefrontEvent(
            "OrderPlaced",
            order_id,
            {
                "order_id": order_id,
                "customer_id": rng.randint(1, 50_000),
                "region": rng.choice(_REGIONS),
                "placed_at": EPOCH_MS + order_id * 1_000 + rng.randint(0, 999),
                "lines": lines,
            },
        )
        yield placed
        emitted += 1
        if rng.random() < pay_ratio:
            paid = StorefrontEvent(
                "PaymentCaptured", order_id, {"order_id": order_id, "amount_cents": total}
            )
            due.append((emitted + rng.randint(1, 8), paid))
            if rng.random() < refund_ratio:
                refund = StorefrontEvent(
                    "RefundIssued",
                    order_id,
                    {
                        "order_id": order_id,
                        "amount_cents": rng.randint(1, total),
                        "reason": rng.choice(_REASONS),
                    },
                )
                due.append((emitted + rng.randint(9, 20), refund))


def manifest_of(count: int, *, seed: int = 1) -> Manifest:
    """The manifest of ``storefront_events(count, seed=seed)`` without keeping the events."""
    manifest = Manifest()
    for event in storefront_events(count, seed=seed):
        manifest.add(event)
    return manifest
