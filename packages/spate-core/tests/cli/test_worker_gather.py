"""B107: the workers of one ``spate run --processes N`` start their pipelines together.

Each worker builds its pipeline, then waits until every sibling has built its own before
it starts (sinks, then the source joining the consumer group), so the group's first
assignment spreads the partitions instead of handing them all to the quickest worker.
These tests drive the worker side (:meth:`WorkerSlot.gather`) and the parent's part (a
worker that exited is never waited for) in one process; the effect on a real consumer
group is measured by ``bench/scaling.py``.
"""

from __future__ import annotations

import threading
from pathlib import Path

from spate.cli._processes import ProcessParent, WorkerSlot
from spate.config import parse_config
from spate.plugins import default_registry

CONFIG = """
pipeline: {name: gather}
source:
  memory: {partitions: 2, records: 10}
sink:
  capture: {}
"""


def _gather_in_thread(slot: WorkerSlot, timeout: float = 60) -> tuple[threading.Thread, list[bool]]:
    result: list[bool] = []
    thread = threading.Thread(target=lambda: result.append(slot.gather(timeout)), daemon=True)
    thread.start()
    return thread, result


def test_b107_a_worker_starts_only_once_every_sibling_has_built(tmp_path: Path) -> None:
    first = WorkerSlot(0, tmp_path, count=3)
    thread, result = _gather_in_thread(first)
    WorkerSlot(1, tmp_path, count=3).gather(0)
    thread.join(0.5)
    assert thread.is_alive(), "worker 0 started before worker 2 had built its pipeline"
    assert WorkerSlot(2, tmp_path, count=3).gather(60) is True  # the last one waits for none
    thread.join(60)
    assert result == [True]


def test_b107_a_restarted_worker_or_a_single_one_does_not_wait(tmp_path: Path) -> None:
    assert WorkerSlot(1, tmp_path, start=1, count=2).gather(60) is True
    assert WorkerSlot(0, tmp_path, count=1).gather(60) is True


def test_b107_the_wait_is_bounded(tmp_path: Path) -> None:
    assert WorkerSlot(0, tmp_path, count=2).gather(0.2) is False


def test_b107_a_worker_that_exited_is_not_waited_for(tmp_path: Path) -> None:
    cfg = parse_config(CONFIG, resolver=default_registry())
    parent = ProcessParent(cfg, 2, ["unused"])
    try:
        waiting = WorkerSlot(0, parent._dir, count=2)
        thread, result = _gather_in_thread(waiting)
        thread.join(0.5)
        assert thread.is_alive()
        parent._exited(parent.workers[1], 1)  # worker 1 died while building
        thread.join(60)
        assert result == [True]
    finally:
        parent.discard()
