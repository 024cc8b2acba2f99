"""``spate run --processes N``: a parent process and N worker processes (ADR 0008).

The parent starts N copies of ``spate run`` on the same configuration (``python -m
spate.cli``), each marked as a worker through the environment (``SPATE_WORKER_INDEX``,
``SPATE_WORKER_DIR``). Kafka workers join the one consumer group of the configuration;
S3 backfill workers register with the coordination store. The parent:

- serves the configuration's admin endpoint for all of them. Each worker binds its own
  admin server on ``127.0.0.1:0`` and writes its address to the worker directory; the
  parent's ``/metrics`` scrapes every live worker and relabels each series with
  ``worker``, next to the parent's own ``spate_supervisor_*`` series. ``/readyz`` is
  ready when every worker answers ready; ``/healthz`` fails when a worker answers 503
  or does not answer at all;
- forwards SIGTERM/SIGINT to every worker and waits for every drain
  (``checkpoint.drain_timeout`` plus :data:`DRAIN_MARGIN`), then kills what is left.
  It exits 0 only when every worker completed (exit 0), 1 otherwise (B14, B16);
- restarts a worker that died (a crash, ``kill -9``, exit 1) under the
  ``supervisor:`` rules (:class:`~spate.pipeline.RestartPolicy`, one per worker); when a
  worker exceeds ``max_restarts`` within ``window``, it drains the others and exits 1
  with one line naming the worker and its last error.

Workers start at once and join the consumer group together: each builds its pipeline,
then waits until every sibling has built its own before it starts (B107), so the group's
first assignment spreads the partitions instead of handing them all to the quickest.

A worker that exits 0 completed (a bounded source drained) and is not restarted.
Workers run their pipeline without an in-process supervisor: the parent is theirs.

Does not own: the pipeline (each worker is an ordinary ``spate run``), the restart rules
(``spate.pipeline._supervisor``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from spate._clock import SystemClock
from spate.admin._server import AdminServer
from spate.admin._shared import merge_families
from spate.config._decode import join_path
from spate.config._units import format_duration
from spate.config.models import PipelineConfig, SupervisorConfig
from spate.errors import ConfigError
from spate.metrics import names
from spate.metrics._meter import Meter
from spate.pipeline._exit import ExitReport
from spate.pipeline._supervisor import RestartPolicy
from spate.plugins._factory import SharedByProcesses

logger = logging.getLogger(__name__)

ENV_INDEX = "SPATE_WORKER_INDEX"
ENV_DIR = "SPATE_WORKER_DIR"
ENV_PARENT = "SPATE_WORKER_PARENT"
ENV_PIPELINE = "SPATE_WORKER_PIPELINE"
"""Which pipeline of a ``pipelines:`` file the worker runs (unset for a file of one)."""
ENV_START = "SPATE_WORKER_START"
"""How many times the parent started this worker slot before (0 for the first start)."""
ENV_COUNT = "SPATE_WORKER_COUNT"
"""How many workers the parent starts (the siblings a first start waits for, B107)."""
GATHER_TIMEOUT = 30.0
"""Longest wait of a worker's first start for its siblings to finish building (B107)."""
_GATHER_POLL = 0.05
DRAIN_MARGIN = 10.0
"""Seconds the parent waits beyond ``checkpoint.drain_timeout`` for workers to exit."""
_SCRAPE_TIMEOUT = 2.0
_TICK = 0.2

_Restore = Callable[[], None]


def resolve_processes(arg: str | None, cfg: PipelineConfig) -> int:
    """The number of workers: ``--processes`` over ``pipeline.processes``; ``auto`` = cores.

    Raises ``ValueError`` with a one-line message for a value that is not a count, and
    ``ConfigError`` when several workers could not share a connector's settings.
    """
    value: int | str = arg if arg is not None else cfg.pipeline.processes
    if value == "auto":
        return usable_cores()
    try:
        count = int(value)
    except ValueError:
        raise ValueError(f"--processes: expected a number or auto, got {value!r}") from None
    if count < 1:
        raise ValueError(f"--processes: must be at least 1, got {count}")
    if count > 1:
        refuse_unshareable(cfg, count)
    return count


def refuse_unshareable(cfg: PipelineConfig, processes: int) -> None:
    """Raise ``ConfigError`` at the first connector setting that ``processes`` workers
    cannot share (:class:`~spate.plugins.SharedByProcesses`), before any worker starts."""
    for spec in cfg.connectors():
        if isinstance(spec.config, SharedByProcesses):
            for key, message in spec.config.processes_errors(processes):
                raise ConfigError(join_path(spec.path, key), message, file=cfg.file)


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity where the platform has one)."""
    affinity = getattr(os, "sched_getaffinity", None)
    if affinity is not None:
        return max(len(affinity(0)), 1)
    return max(os.cpu_count() or 1, 1)


# -- the worker side ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class WorkerSlot:
    """This process is worker ``index`` of a parent that watches ``directory``."""

    index: int
    directory: Path
    parent: int | None = None
    """The parent's pid as the parent gave it; the worker's own view of its parent
    (``os.getppid()`` at the time it looks) is wrong once the parent died first."""
    pipeline: str | None = None
    """The pipeline of a ``pipelines:`` file this worker runs; None for a file of one."""
    start: int = 0
    """How many times this slot was started before (a restart counts up)."""
    count: int = 1
    """How many workers the parent runs (this one included)."""

    @classmethod
    def from_env(cls) -> WorkerSlot | None:
        index, directory = os.environ.get(ENV_INDEX), os.environ.get(ENV_DIR)
        if index is None or directory is None or not index.isdigit():
            return None
        parent = os.environ.get(ENV_PARENT, "")
        start = os.environ.get(ENV_START, "")
        count = os.environ.get(ENV_COUNT, "")
        return cls(
            int(index),
            Path(directory),
            int(parent) if parent.isdigit() else None,
            os.environ.get(ENV_PIPELINE) or None,
            int(start) if start.isdigit() else 0,
            int(count) if count.isdigit() else 1,
        )

    def config(self, cfg: PipelineConfig) -> PipelineConfig:
        """``cfg`` as a worker runs it: its admin server on a free loopback port (the
        parent serves the configured one), no in-process supervisor, one process, and
        its own coordination instance id (B93)."""
        listen = "none" if cfg.admin.listen == "none" else "127.0.0.1:0"
        return dataclasses.replace(
            cfg,
            admin=dataclasses.replace(cfg.admin, listen=listen),
            pipeline=dataclasses.replace(cfg.pipeline, processes=1),
            supervisor=None,
            coordination=self.coordination(cfg.coordination),
        )

    def coordination(self, section: Mapping[str, object] | None) -> Mapping[str, object] | None:
        """The ``coordination`` section with an instance id of this worker's own (B93).

        A configured ``instance_id`` is shared by every worker of the file, and the
        store refuses a second live instance under one id: each worker runs as
        ``<instance_id>-w<index>``, and a restarted one as ``<instance_id>-w<index>r<n>``
        (the dead one's id stays taken until its lease lapses). Without ``instance_id``
        the default, ``<host>-<pid>``, already differs between processes."""
        if section is None or not isinstance(section.get("instance_id"), str):
            return section
        suffix = f"-w{self.index}" + (f"r{self.start}" if self.start else "")
        return {**section, "instance_id": f"{section['instance_id']}{suffix}"}

    def gather(self, timeout: float = GATHER_TIMEOUT) -> bool:
        """Wait until every sibling has built its pipeline too; True when all have (B107).

        Called once the pipeline is built (imports, configuration, connectors) and before
        it starts (sinks, then the source joining the consumer group). Start-up takes
        seconds and differs between workers; a worker that joined the group alone would
        be given every partition and read them all until the next rebalance reached it.
        Gathered first, the workers join within moments of each other. Only a slot's
        first start waits: a restarted worker joins a group already running. Bounded by
        ``timeout``, so a sibling that fails to build delays the others, never stops them.
        """
        _write_atomically(self.directory / f"worker-{self.index}.built", "")
        if self.start > 0 or self.count < 2:
            return True
        siblings = [self.directory / f"worker-{i}.built" for i in range(self.count)]
        deadline = time.monotonic() + timeout
        while True:
            missing = [path for path in siblings if not path.exists()]
            if not missing:
                return True
            if time.monotonic() >= deadline:
                logger.warning(
                    "worker %d: %d sibling(s) not built after %gs; starting without them",
                    self.index,
                    len(missing),
                    timeout,
                )
                return False
            time.sleep(_GATHER_POLL)

    def announce(self, url: str | None) -> None:
        """Tell the parent where this worker's admin server listens."""
        if url is not None:
            _write_atomically(self.directory / f"worker-{self.index}.url", url)

    def watch_parent(self, interval: float = 1.0) -> None:
        """Drain (SIGTERM to this process) once the parent is gone, so a killed parent
        never leaves workers running on their own. Starts a daemon thread.

        The parent is the pid the parent put in the environment, not ``os.getppid()``
        now: a parent killed while this worker was still starting has already been
        replaced by init (or a subreaper), and watching that one would never end."""
        parent = self.parent if self.parent is not None else os.getppid()

        def watch() -> None:
            while os.getppid() == parent:
                time.sleep(interval)
            logger.error("worker %d: the parent process is gone; draining", self.index)
            os.kill(os.getpid(), signal.SIGTERM)

        threading.Thread(target=watch, name="spate-parent-watch", daemon=True).start()

    def label_logs(self) -> None:
        """Mark every log line of this worker with ``worker=<index>`` (the parent's and
        the siblings' lines share one stream)."""
        index = self.index

        def label(record: logging.LogRecord) -> bool:
            record.worker = index
            return True

        for handler in logging.getLogger().handlers:
            handler.addFilter(label)

    def report(self, report: ExitReport) -> None:
        """Leave this run's counts for the parent's total (one line per run, appended:
        a restarted worker's earlier runs count too)."""
        line = json.dumps(
            {
                "records_in": report.records_in,
                "records_delivered": report.records_delivered,
                "records_failed": report.records_failed,
                "dropped": report.dropped,
                "source_dropped": report.source_dropped,
                "late_rows": report.late_rows,
            }
        )
        with (self.directory / f"worker-{self.index}.reports").open("a") as out:
            out.write(line + "\n")

    def last_words(self, text: str) -> None:
        """Leave the reason this worker is ending for the parent's give-up line."""
        _write_atomically(self.directory / f"worker-{self.index}.last", text)


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


# -- the parent side ---------------------------------------------------------------------


class _Worker:
    """One worker slot in the parent: its process, restart policy and metrics."""

    def __init__(self, index: int, policy: RestartPolicy, meter: Meter) -> None:
        self.index = index
        self.policy = policy
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        self.starts = 0
        self.restart_at: float | None = None
        self.exit_code: int | None = None
        self.done = False
        self.last_error = ""
        labels = {"component": "supervisor", "component_type": "supervisor"}
        labels["worker"] = str(index)
        self.failures = meter.counter(names.SUPERVISOR_FAILURES, **labels)
        self.restarts = meter.counter(names.SUPERVISOR_RESTARTS, **labels)
        self.give_ups = meter.counter(names.SUPERVISOR_GIVE_UPS, **labels)
        self.backoff = meter.gauge(names.SUPERVISOR_BACKOFF, **labels)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class ProcessParent:
    """Runs N workers of one configuration and supervises them (main thread)."""

    def __init__(
        self,
        cfg: PipelineConfig,
        processes: int,
        worker_argv: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        serve_admin: bool = True,
    ) -> None:
        self.cfg = cfg
        self.serve_admin = serve_admin
        """False when a shared endpoint serves this parent with other pipelines (B94)."""
        self.processes = processes
        self.rules = cfg.supervisor if cfg.supervisor is not None else SupervisorConfig()
        self._argv = list(worker_argv)
        self._env = dict(os.environ if env is None else env)
        self._clock = SystemClock()
        self._stop = threading.Event()
        self._stop_reason: str | None = None
        self._dir = Path(tempfile.mkdtemp(prefix="spate-workers-"))
        self.meter = Meter(cfg.pipeline.name, declare=None)
        self.workers = [
            _Worker(i, RestartPolicy(self.rules, self._clock), self.meter) for i in range(processes)
        ]
        self.gave_up: _Worker | None = None
        self.give_up_text = ""
        """The one line naming the worker that gave up and its last error."""

    # -- admin ---------------------------------------------------------------------------

    def worker_url(self, worker: _Worker) -> str | None:
        if not worker.alive:
            return None
        path = self._dir / f"worker-{worker.index}.url"
        try:
            return path.read_text(encoding="utf-8").strip() or None
        except OSError:
            return None

    def readiness(self) -> tuple[bool, str]:
        for worker in self.workers:
            if worker.done:
                continue
            url = self.worker_url(worker)
            if url is None:
                return False, f"worker {worker.index} not running"
            status, text = _get(url + "/readyz")
            if status != 200:
                return False, f"worker {worker.index}: {text or 'no answer'}"
        return True, "ready"

    def liveness(self, stall_after: float) -> tuple[bool, str]:
        for worker in self.workers:
            url = self.worker_url(worker)
            if url is None:
                continue  # finished, or waiting to restart: not stuck
            status, text = _get(url + "/healthz")
            if status != 200:
                return False, f"worker {worker.index}: {text or 'no answer'}"
        return True, "alive"

    # -- running -------------------------------------------------------------------------

    def run(self) -> int:
        """Start the workers, supervise them until done or stopped; the exit code."""
        admin = self._admin()
        restore = self._install_signals()
        try:
            if admin is not None:
                admin.start(self)
            logger.info(
                "pipeline %s: starting %d worker processes", self.cfg.pipeline.name, self.processes
            )
            for worker in self.workers:
                self._start(worker)
            self._supervise()
            code = self._drain()
            self._log_total()
            return code
        finally:
            restore()
            if admin is not None:
                admin.stop()
            self.discard()

    def discard(self) -> None:
        """Remove the worker directory (after a run, or for a parent that never ran)."""
        if not self._dir.exists():
            return
        for path in self._dir.iterdir():
            path.unlink(missing_ok=True)
        self._dir.rmdir()

    def request_stop(self, reason: str) -> None:
        if self._stop_reason is None:
            self._stop_reason = reason
        self._stop.set()

    @property
    def name(self) -> str:
        return self.cfg.pipeline.name

    def collector(self) -> Collector:
        """Every worker's series labelled ``worker``, and the parent's own."""
        return _WorkersCollector(self)

    def _admin(self) -> AdminServer | None:
        if self.cfg.admin.listen == "none" or not self.serve_admin:
            return None
        registry = None
        if self.cfg.metrics.exporter == "prometheus":
            registry = CollectorRegistry(auto_describe=False)
            registry.register(self.collector())
        return AdminServer(
            self.cfg.admin.listen,
            registry=registry,
            stall_after=self.cfg.admin.stall_after,
            pipeline=self.cfg.pipeline.name,
        )

    def _install_signals(self) -> _Restore:
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

        def on_signal(signum: int, frame: FrameType | None) -> None:
            self.request_stop(f"signal {signal.Signals(signum).name}")

        for sig in previous:
            signal.signal(sig, on_signal)

        def restore() -> None:
            for sig, old in previous.items():
                signal.signal(sig, old if old is not None else signal.SIG_DFL)

        return restore

    def _start(self, worker: _Worker) -> None:
        (self._dir / f"worker-{worker.index}.url").unlink(missing_ok=True)
        (self._dir / f"worker-{worker.index}.last").unlink(missing_ok=True)
        env = dict(
            self._env,
            **{
                ENV_INDEX: str(worker.index),
                ENV_DIR: str(self._dir),
                ENV_PARENT: str(os.getpid()),
                ENV_START: str(worker.starts),
                ENV_COUNT: str(self.processes),
            },
        )
        if self.cfg.index is not None:
            env[ENV_PIPELINE] = self.cfg.pipeline.name
        worker.proc = subprocess.Popen(self._argv, env=env)
        worker.starts += 1
        worker.started_at = self._clock.monotonic()
        worker.restart_at = None
        worker.exit_code = None
        logger.info(
            "pipeline %s: worker %d started (pid %d)", self.name, worker.index, worker.proc.pid
        )

    def _supervise(self) -> None:
        while not self._stop.is_set():
            now = self._clock.monotonic()
            for worker in self.workers:
                if worker.restart_at is not None and now >= worker.restart_at:
                    worker.backoff.set(0)
                    worker.restarts.inc()
                    self._start(worker)
                elif worker.proc is not None and worker.exit_code is None:
                    code = worker.proc.poll()
                    if code is not None:
                        self._exited(worker, code)
            if self.gave_up is not None:
                return
            if all(w.done for w in self.workers):
                return
            self._stop.wait(_TICK)

    def _exited(self, worker: _Worker, code: int) -> None:
        worker.exit_code = code
        # Siblings still gathering (B107) wait for a built pipeline; this one will not come.
        _write_atomically(self._dir / f"worker-{worker.index}.built", "")
        if code == 0:
            worker.done = True
            logger.info("pipeline %s: worker %d completed", self.name, worker.index)
            return
        if self._stop.is_set():
            return
        worker.last_error = self._last_error(worker, code)
        worker.failures.inc()
        decision = worker.policy.failed(self._clock.monotonic() - worker.started_at)
        if decision.give_up:
            worker.give_ups.inc()
            self.gave_up = worker
            self.give_up_text = self.give_up_line(worker, decision.failures)
            logger.error("%s", self.give_up_text)
            return
        logger.warning(
            "pipeline %s: worker %d died (%s; %d of at most %d within %s); restarting in %s",
            self.name,
            worker.index,
            worker.last_error,
            decision.failures,
            self.rules.max_restarts,
            format_duration(self.rules.window),
            format_duration(decision.delay),
        )
        worker.backoff.set(decision.delay)
        worker.restart_at = self._clock.monotonic() + decision.delay

    def give_up_line(self, worker: _Worker, failures: int) -> str:
        return (
            f"pipeline {self.cfg.pipeline.name}: worker {worker.index} gave up after "
            f"{failures} failures within {format_duration(self.rules.window)} "
            f"(supervisor.max_restarts={self.rules.max_restarts}); "
            f"last error: {worker.last_error}"
        )

    def _last_error(self, worker: _Worker, code: int) -> str:
        try:
            words = (self._dir / f"worker-{worker.index}.last").read_text(encoding="utf-8")
        except OSError:
            words = ""
        how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        return f"{how}: {words.strip()}" if words.strip() else how

    def _drain(self) -> int:
        """Forward the stop to every live worker, wait for each drain; the exit code."""
        live = [w for w in self.workers if w.alive]
        if live:
            reason = self._stop_reason or (
                f"worker {self.gave_up.index} gave up" if self.gave_up else "stopping"
            )
            logger.info("stopping %d worker(s): %s", len(live), reason)
        for worker in live:
            assert worker.proc is not None
            worker.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.cfg.checkpoint.drain_timeout + DRAIN_MARGIN
        for worker in live:
            assert worker.proc is not None
            try:
                code = worker.proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                logger.error("worker %d did not drain in time; killing it", worker.index)
                worker.proc.kill()
                code = worker.proc.wait()
            worker.exit_code = code
            worker.done = code == 0
        for worker in self.workers:
            worker.backoff.set(0)
            if worker.restart_at is not None:
                # Waiting to restart when the stop came: its last run failed.
                worker.done = False
        failed = [w.index for w in self.workers if not w.done]
        if self.gave_up is not None:
            return 1
        if failed:
            logger.error(
                "pipeline %s: worker(s) %s did not complete",
                self.cfg.pipeline.name,
                ", ".join(map(str, failed)),
            )
            return 1
        logger.info("pipeline %s: every worker completed", self.cfg.pipeline.name)
        return 0

    def _log_total(self) -> None:
        """One line summing the workers' run reports (each worker logged its own)."""
        total: dict[str, Any] = {"dropped": {}, "source_dropped": {}, "late_rows": {}}
        runs = 0
        for worker in self.workers:
            path = self._dir / f"worker-{worker.index}.reports"
            try:
                lines = path.read_text().splitlines()
            except OSError:
                continue
            for line in lines:
                try:
                    counts = json.loads(line)
                except ValueError:
                    continue  # a worker killed while writing
                runs += 1
                for key, value in counts.items():
                    if isinstance(value, dict):
                        into = total.setdefault(key, {})
                        for why, n in value.items():
                            into[why] = into.get(why, 0) + int(n)
                    else:
                        total[key] = total.get(key, 0) + int(value)
        ended = sum(w.starts for w in self.workers)
        summary = ExitReport(
            pipeline=self.cfg.pipeline.name,
            state="completed",
            reason="",
            records_in=total.get("records_in", 0),
            records_delivered=total.get("records_delivered", 0),
            records_failed=total.get("records_failed", 0),
            dropped=total["dropped"],
            source_dropped=total["source_dropped"],
            late_rows=total["late_rows"],
        )
        counts = summary.counts()
        unreported = max(ended - runs, 0)
        logger.info(
            "pipeline %s: total of %d worker(s), %d run(s): %s%s",
            self.cfg.pipeline.name,
            len(self.workers),
            runs,
            counts,
            f" ({unreported} run(s) ended without a report (killed): their counts are "
            "missing from the total)"
            if unreported
            else "",
        )


class _WorkersCollector(Collector):
    """``/metrics`` of the parent: every live worker's series labelled ``worker``."""

    def __init__(self, parent: ProcessParent) -> None:
        self._parent = parent

    def collect(self) -> Iterator[Metric]:
        sources: list[tuple[Iterable[Metric], dict[str, str]]] = [
            (self._parent.meter.registry.collect(), {})
        ]
        for worker in self._parent.workers:
            url = self._parent.worker_url(worker)
            if url is None:
                continue
            status, text = _get(url + "/metrics")
            if status == 200:
                families = text_string_to_metric_families(text)
                sources.append((families, {"worker": str(worker.index)}))
        yield from merge_families(sources)


def _get(url: str) -> tuple[int, str]:
    """GET ``url`` with a short timeout: status and body (0 and "" when unreachable)."""
    try:
        with urllib.request.urlopen(url, timeout=_SCRAPE_TIMEOUT) as response:
            return int(response.status), response.read().decode("utf-8", "replace").strip()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode("utf-8", "replace").strip()
    except (OSError, ValueError):
        return 0, ""


def worker_command(
    config: str, *, chain: str | None, log_level: str, executable: str | None = None
) -> list[str]:
    """The command line of one worker: ``spate run`` on the same configuration."""
    argv = [executable or sys.executable, "-m", "spate.cli", "--log-level", log_level]
    argv += ["run", config]
    if chain is not None:
        argv += ["--chain", chain]
    return argv
