"""Deterministic wide events: about 1.6 KB each, the size real topics carry.

``wide_events(count, seed=...)`` always yields the same events for the same seed, one
``WideEvent`` record each (``spate.datagen.WideEvent``, ``wide.avsc``): UUIDs (the
event's, and a tenant's, user's, session's and each item's), nested objects (tenant,
user, session with its geo), strings of varying length (a URL, a user agent, a free-text
message), integers, a millisecond timestamp and two arrays (items, tags). Records hold
UUIDs as strings, so the JSON and the Avro encodings carry the same values.

The sizes are part of the contract: over a few thousand events the mean JSON payload is
within :data:`WIDE_MEAN_BAND` bytes (about 1.6 KB) and the mean raw Avro payload, the
same values without field names or quotes, within :data:`WIDE_AVRO_MEAN_BAND` (about
1.05 KB; Confluent framing adds five bytes).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from typing import Literal

from spate_datagen._events import EPOCH_MS, EventKind, StorefrontEvent, storefront_events

WIDE_KIND: EventKind = "WideEvent"
EventSet = Literal["storefront", "wide"]
WIDE_MEAN_BAND = (1400, 1800)
"""Mean JSON payload size of wide events, in bytes (about 1.6 KB)."""
WIDE_AVRO_MEAN_BAND = (900, 1200)
"""Mean raw Avro payload size of wide events, in bytes (about 1.05 KB)."""

_TYPES = ("page_view", "click", "add_to_cart", "checkout", "search", "signup")
_PLANS = ("free", "team", "business", "enterprise")
_LOCALES = ("en-GB", "en-US", "de-DE", "fr-FR", "es-ES", "ja-JP", "pt-BR")
_PLACES = (
    ("GB", "London"),
    ("DE", "Berlin"),
    ("FR", "Paris"),
    ("US", "San Francisco"),
    ("US", "New York"),
    ("JP", "Tokyo"),
    ("BR", "São Paulo"),
    ("IN", "Bengaluru"),
)
_WORDS = [
    "lorem",
    "ipsum",
    "dolor",
    "sit",
    "amet",
    "consectetur",
    "adipiscing",
    "elit",
    "sed",
    "do",
    "eiusmod",
    "tempor",
    "incididunt",
    "ut",
    "labore",
    "et",
    "dolore",
    "magna",
    "aliqua",
    "enim",
    "ad",
    "minim",
    "veniam",
    "quis",
    "nostrud",
    "exercitation",
    "ullamco",
    "laboris",
    "nisi",
    "aliquip",
    "ex",
    "ea",
    "commodo",
    "consequat",
    "duis",
    "aute",
    "irure",
    "in",
    "reprehenderit",
    "voluptate",
    "velit",
    "esse",
    "cillum",
    "fugiat",
    "nulla",
    "pariatur",
    "excepteur",
    "sint",
    "occaecat",
    "cupidatat",
    "non",
    "proident",
    "sunt",
    "culpa",
    "qui",
    "officia",
    "deserunt",
    "mollit",
    "anim",
    "id",
    "est",
]
_AGENTS = (
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/126.0.0.0 Safari/537.36",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_5) AppleWebKit/605.1.15 (KHTML, like Gecko) "
    "Version/17.5 Safari/605.1.15",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:127.0) Gecko/20100101 Firefox/127.0",
)
_TAGS = ("beta", "mobile", "returning", "promo", "vip", "ab-test", "organic", "paid", "eu")


def _uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _text(rng: random.Random, low: int, high: int) -> str:
    """Words up to a length drawn from ``[low, high]`` characters."""
    limit = rng.randint(low, high)
    words: list[str] = []
    size = 0
    while size < limit:
        word = rng.choice(_WORDS)
        words.append(word)
        size += len(word) + 1
    return " ".join(words)[:limit]


def wide_events(count: int, *, seed: int = 1, first_seq: int = 1) -> Iterator[StorefrontEvent]:
    """Yield exactly ``count`` wide events, deterministically for a given ``seed``.

    Each is a :class:`StorefrontEvent` of kind ``WideEvent`` whose ``order_id`` is its
    sequence number (the key, and what spreads events over lanes).
    """
    if count < 0:
        raise ValueError("count must not be negative")
    rng = random.Random(seed)
    tenants = [
        {
            "id": _uuid(rng),
            "name": _text(rng, 8, 30).title(),
            "plan": rng.choice(_PLANS),
            "seats": rng.randint(1, 5_000),
        }
        for _ in range(64)
    ]
    for seq in range(first_seq, first_seq + count):
        occurred = EPOCH_MS + seq * 10 + rng.randint(0, 9)
        country, city = rng.choice(_PLACES)
        user_name = _text(rng, 6, 24).title()
        record: dict[str, object] = {
            "event_id": _uuid(rng),
            "seq": seq,
            "occurred_at": occurred,
            "event_type": rng.choice(_TYPES),
            "status_code": rng.choice((200, 200, 200, 201, 204, 301, 404, 500)),
            "duration_ms": rng.randint(1, 30_000),
            "bytes_sent": rng.randint(200, 5_000_000),
            "tenant": dict(rng.choice(tenants)),
            "user": {
                "id": _uuid(rng),
                "email": user_name.lower().replace(" ", ".") + "@example.com",
                "display_name": user_name,
                "age": rng.randint(16, 90),
                "locale": rng.choice(_LOCALES),
            },
            "session": {
                "id": _uuid(rng),
                "started_at": occurred - rng.randint(0, 3_600_000),
                "page_views": rng.randint(1, 200),
                "referrer": "https://" + _text(rng, 10, 60).replace(" ", "-") + ".example",
                "user_agent": rng.choice(_AGENTS),
                "geo": {
                    "country": country,
                    "city": city,
                    "latitude_e6": rng.randint(-90_000_000, 90_000_000),
                    "longitude_e6": rng.randint(-180_000_000, 180_000_000),
                },
            },
            "url": "https://shop.example/" + _text(rng, 20, 120).replace(" ", "/"),
            "message": _text(rng, 100, 400),
            "items": [
                {
                    "id": _uuid(rng),
                    "title": _text(rng, 10, 60),
                    "quantity": rng.randint(1, 9),
                    "price_cents": rng.randint(99, 250_000),
                }
                for _ in range(rng.randint(1, 6))
            ],
            "tags": rng.sample(_TAGS, rng.randint(0, 5)),
        }
        yield StorefrontEvent(WIDE_KIND, seq, record)


def events_of(events: EventSet, count: int, *, seed: int = 1) -> Iterator[StorefrontEvent]:
    """The events of ``events`` (``storefront`` or ``wide``) for ``count`` and ``seed``."""
    if events == "wide":
        return wide_events(count, seed=seed)
    if events == "storefront":
        return storefront_events(count, seed=seed)
    raise ValueError(f"unknown datagen events {events!r} (expected storefront or wide)")
