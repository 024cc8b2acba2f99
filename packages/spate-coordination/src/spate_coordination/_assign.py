"""The assignment function: which live worker should own which split (pure, B24).

Owns :func:`assign`, a pure function of the splits (with weights), the live workers
and the current owners. The leader calls it on every tick; it has no I/O, no clock and
no randomness, so every leader computes the same answer from the same inputs.

Promises (property-tested):

* deterministic — the result depends only on the inputs' contents, not their order;
* complete and exclusive — every split is assigned to exactly one live worker (when
  there is at least one);
* balanced — the loads (sums of weights) of any two workers differ by at most the
  largest split weight;
* sticky — a split whose current owner is live stays with it unless moving it is needed
  for balance; feeding the result back in returns it unchanged.

How: keep every split with its live current owner; place the rest heaviest first on the
least-loaded worker; then, while the most and least loaded workers differ by more than
the largest weight, move the heaviest split that narrows the gap from the former to the
latter. Each move strictly lowers the sum of squared loads, so the loop ends.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def assign(
    splits: Mapping[str, float],
    workers: Iterable[str],
    current: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Map each split id to a worker id.

    ``splits`` maps split id to a positive weight; ``workers`` are the live worker ids;
    ``current`` maps split id to its present owner (owners not in ``workers`` and splits
    not in ``splits`` are ignored). With no workers, nothing is assigned (every split is
    on hold). Raises ``ValueError`` for a weight that is not positive.
    """
    live = sorted(set(workers))
    if not live:
        return {}
    for split, weight in splits.items():
        if not weight > 0:
            raise ValueError(f"split {split!r} has weight {weight!r}; weights must be positive")
    current = current or {}
    load: dict[str, float] = dict.fromkeys(live, 0.0)
    owned: dict[str, set[str]] = {w: set() for w in live}
    result: dict[str, str] = {}

    # 1. Stickiness: keep splits with their live owners.
    unplaced: list[str] = []
    for split in sorted(splits):
        owner = current.get(split)
        if owner is not None and owner in load:
            result[split] = owner
            load[owner] += splits[split]
            owned[owner].add(split)
        else:
            unplaced.append(split)

    # 2. New or orphaned splits: heaviest first onto the least-loaded worker.
    unplaced.sort(key=lambda s: (-splits[s], s))
    for split in unplaced:
        target = min(live, key=lambda w: (load[w], w))
        result[split] = target
        load[target] += splits[split]
        owned[target].add(split)

    # 3. Balance: move splits from the heaviest to the lightest worker.
    if len(live) > 1 and splits:
        limit = max(splits.values())
        while True:
            heavy = max(live, key=lambda w: (load[w], _rev(w)))
            light = min(live, key=lambda w: (load[w], w))
            gap = load[heavy] - load[light]
            if gap <= limit + _EPSILON * max(1.0, limit):
                break
            # Heaviest split that narrows the gap (weight < gap always holds here).
            candidates = [s for s in owned[heavy] if splits[s] < gap]
            if not candidates:
                break  # cannot happen while gap > limit; kept as a guard against loops
            move = min(candidates, key=lambda s: (-splits[s], s))
            owned[heavy].remove(move)
            owned[light].add(move)
            load[heavy] -= splits[move]
            load[light] += splits[move]
            result[move] = light
    return result


_EPSILON = 1e-9


def _rev(worker: str) -> tuple[int, ...]:
    """Sort key that makes ``max`` pick the smallest id among equal loads."""
    return (*(-ord(c) for c in worker), 1)


def loads(splits: Mapping[str, float], assignment: Mapping[str, str]) -> dict[str, float]:
    """Sum of split weights per worker in ``assignment`` (for tests and metrics)."""
    out: dict[str, float] = {}
    for split, worker in assignment.items():
        out[worker] = out.get(worker, 0.0) + splits[split]
    return out
