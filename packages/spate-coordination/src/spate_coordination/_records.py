"""The records coordination keeps in the store: key layout and JSON encoding.

Owns the key names and the (de)serialisation of every value, so that the layout is
written down in one place::

    TTL keyspace (expires lease_duration after the last write)
      member.<instance>   {"instance", "session"}          heartbeat of a live instance
      leader              {"instance", "session"}          the leader lease
    durable keyspace
      plan                {"splits": n, "digest"}          written after every split.<id>
      split.<id>          {"weight", "meta"}               one planned split
      assign.<id>         {"owner", "revoke_to"}           leader's decision; absent = hold
      state.<id>          {"epoch", "owner", "completed", "progress", "quarantined"}
      done                {"splits": n}                    every split completed

A split whose ``quarantined`` holds a reason is neither completed nor assigned: it waits,
with its progress, until it is retried (the quarantine cleared) or the job is abandoned.

``state.<id>`` holds the fencing epoch and the progress in one value, so a progress
write is a single compare-and-set that fails as soon as a successor bumped the epoch
(B24). Does not own any decision about these records.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field

MEMBER_PREFIX = "member."
LEADER_KEY = "leader"
PLAN_KEY = "plan"
DONE_KEY = "done"
SPLIT_PREFIX = "split."
ASSIGN_PREFIX = "assign."
STATE_PREFIX = "state."

JsonValue = None | bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"]
Progress = bytes | dict[str, JsonValue]
"""What a source commits for a split: opaque bytes or a JSON object."""


def _dumps(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()


def _loads(raw: bytes, what: str) -> dict[str, JsonValue]:
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise ValueError(f"corrupt {what} record: {exc}") from None
    if not isinstance(value, dict):
        raise ValueError(f"corrupt {what} record: expected an object")
    return value


def key_tail(key: str, prefix: str) -> str:
    """``key_tail("assign.s1", "assign.")`` → ``"s1"``."""
    return key[len(prefix) :]


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """Value of ``member.<instance>`` and ``leader``."""

    instance: str
    session: str

    def encode(self) -> bytes:
        return _dumps({"instance": self.instance, "session": self.session})

    @classmethod
    def decode(cls, raw: bytes) -> LeaseRecord:
        d = _loads(raw, "lease")
        return cls(str(d.get("instance", "")), str(d.get("session", "")))


@dataclass(frozen=True, slots=True)
class SplitSpec:
    """One planned split: its id, weight and the metadata its reader needs."""

    split_id: str
    weight: float = 1.0
    meta: Mapping[str, JsonValue] = field(default_factory=dict)

    def encode(self) -> bytes:
        return _dumps({"weight": self.weight, "meta": dict(self.meta)})

    @classmethod
    def decode(cls, split_id: str, raw: bytes) -> SplitSpec:
        d = _loads(raw, "split")
        weight = d.get("weight", 1.0)
        meta = d.get("meta") or {}
        if not isinstance(weight, (int, float)) or not isinstance(meta, dict):
            raise ValueError(f"corrupt split record for {split_id!r}")
        return cls(split_id, float(weight), meta)


def plan_digest(specs: list[SplitSpec]) -> str:
    """A digest of a plan's split ids, weights and metadata (order-independent)."""
    h = hashlib.sha256()
    for spec in sorted(specs, key=lambda s: s.split_id):
        h.update(spec.split_id.encode())
        h.update(b"\0")
        h.update(spec.encode())
        h.update(b"\n")
    return h.hexdigest()


@dataclass(frozen=True, slots=True)
class PlanRecord:
    splits: int
    digest: str

    def encode(self) -> bytes:
        return _dumps({"splits": self.splits, "digest": self.digest})

    @classmethod
    def decode(cls, raw: bytes) -> PlanRecord:
        d = _loads(raw, "plan")
        splits, digest = d.get("splits"), d.get("digest")
        if not isinstance(splits, int) or not isinstance(digest, str):
            raise ValueError("corrupt plan record")
        return cls(splits, digest)


@dataclass(frozen=True, slots=True)
class AssignRecord:
    """The leader's decision for one split; ``revoke_to`` set = owner asked to drain."""

    owner: str
    revoke_to: str | None = None

    def encode(self) -> bytes:
        return _dumps({"owner": self.owner, "revoke_to": self.revoke_to})

    @classmethod
    def decode(cls, raw: bytes) -> AssignRecord:
        d = _loads(raw, "assignment")
        owner, revoke_to = d.get("owner"), d.get("revoke_to")
        if not isinstance(owner, str) or not (revoke_to is None or isinstance(revoke_to, str)):
            raise ValueError("corrupt assignment record")
        return cls(owner, revoke_to)


@dataclass(frozen=True, slots=True)
class StateRecord:
    """Fencing epoch, current owner (``None`` once released), progress and, for a split
    in quarantine, the reason it was put there."""

    epoch: int = 0
    owner: str | None = None
    completed: bool = False
    progress: Progress | None = None
    quarantined: str | None = None

    def encode(self) -> bytes:
        progress: dict[str, JsonValue] | None
        if self.progress is None:
            progress = None
        elif isinstance(self.progress, (bytes, bytearray, memoryview)):
            progress = {"b64": base64.b64encode(bytes(self.progress)).decode()}
        else:
            progress = {"json": self.progress}
        return _dumps(
            {
                "epoch": self.epoch,
                "owner": self.owner,
                "completed": self.completed,
                "progress": progress,
                "quarantined": self.quarantined,
            }
        )

    @classmethod
    def decode(cls, raw: bytes) -> StateRecord:
        d = _loads(raw, "split state")
        epoch, owner, completed = d.get("epoch", 0), d.get("owner"), d.get("completed", False)
        quarantined = d.get("quarantined")
        if (
            not isinstance(epoch, int)
            or not (owner is None or isinstance(owner, str))
            or not (quarantined is None or isinstance(quarantined, str))
        ):
            raise ValueError("corrupt split state record")
        raw_progress = d.get("progress")
        progress: Progress | None = None
        if isinstance(raw_progress, dict):
            if "b64" in raw_progress and isinstance(raw_progress["b64"], str):
                progress = base64.b64decode(raw_progress["b64"])
            elif isinstance(raw_progress.get("json"), dict):
                value = raw_progress["json"]
                assert isinstance(value, dict)
                progress = value
        return cls(epoch, owner, bool(completed), progress, quarantined)
