"""The ``spate`` command: ``run``, ``validate``, ``plugins``, ``new-connector`` and
contributed subcommands.

Exit codes follow command-line conventions (B16): 0 success (a run that completed),
1 failure (a run that failed, or a service unreachable at start-up), 2 invalid usage or
configuration (``spate validate`` on a bad file, an unknown connector, a bad
``--chain``). Every error the user can fix is one line on stderr naming the key, file or
endpoint, never a traceback (B29); ``--log-level debug`` adds the traceback to the log.

Subcommands of other distributions come from the ``spate.commands`` entry-point group;
a contributed command is imported only when it is the one being run. This is the only
place that configures logging (``key=value`` lines on stderr).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from prometheus_client import CollectorRegistry
from prometheus_client.registry import Collector

from spate import __version__
from spate._secrets import redact
from spate._supervised import SupervisedRun, run_side_by_side, supervise
from spate.admin._probes import HealthView
from spate.admin._server import AdminServer
from spate.admin._shared import AllHealth, MergedCollector
from spate.cli._logging import LEVELS, configure_logging
from spate.cli._processes import ProcessParent, WorkerSlot, resolve_processes, worker_command
from spate.cli._progress import progress_bar
from spate.cli._scaffold import KINDS, ScaffoldError, new_connector
from spate.config._loader import load_configs
from spate.config.models import PipelineConfig
from spate.errors import ConfigError, PluginError, SpateError
from spate.pipeline._builder import Pipeline, assemble
from spate.pipeline._exit import ExitReport
from spate.plugins._registry import Registry, default_registry
from spate.sink._gate import CommitGates

logger = logging.getLogger(__name__)


EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

BUILTIN_COMMANDS = ("run", "validate", "plugins", "new-connector")


def one_line(exc: BaseException) -> str:
    """The error as one line (messages from libraries sometimes carry newlines)."""
    text = " ".join(str(exc).split("\n")).strip()
    return text or type(exc).__name__


def load_chain(spec: str) -> Callable[[Any], Any]:
    """Import the user's ``chains(ctx)`` from ``module:function``.

    The current directory is importable, as it is for ``python -m``. Raises
    ``ConfigError`` at ``--chain`` when the module or function cannot be found.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError("--chain", f"expected module:function, got {spec!r}")
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError("--chain", f"cannot import module {module_name!r}: {exc}") from exc
    except Exception as exc:  # the user's module failed while importing
        logger.debug("importing %s failed", module_name, exc_info=True)
        raise ConfigError(
            "--chain", f"importing {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from exc
    target: Any = module
    for part in attr.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise ConfigError("--chain", f"module {module_name!r} has no attribute {attr!r}")
    if not callable(target):
        raise ConfigError("--chain", f"{spec} is not a function taking the chain context")
    chain_fn: Callable[[Any], Any] = target
    return chain_fn


def _describe(cfg: PipelineConfig) -> str:
    parts = [f"source {cfg.source.tag}"]
    if cfg.deserializer is not None:
        parts.append(f"deserializer {cfg.deserializer.tag}")
    if cfg.sinks_map:
        sinks = ", ".join(f"{name}={spec.tag}" for name, spec in cfg.sinks.items())
        parts.append(f"sinks {sinks}")
    else:
        parts.append(f"sink {cfg.sinks['sink'].tag}")
    return f"pipeline {cfg.pipeline.name}: " + ", ".join(parts)


class _Cli:
    def __init__(
        self,
        registry: Registry,
        stdout: TextIO,
        stderr: TextIO,
        log_handler: logging.StreamHandler[Any] | None = None,
    ) -> None:
        self.registry = registry
        self.commit_gates = CommitGates()
        """The process's commit-gate locks: pipelines run side by side here share them, so
        their writers of one destination commit one at a time (B231)."""
        self.stdout = stdout
        self.stderr = stderr
        self.log_handler = log_handler

    def error(self, exc: BaseException | str) -> None:
        text = exc if isinstance(exc, str) else one_line(exc)
        print(redact(text), file=self.stderr)

    def validate(self, args: argparse.Namespace) -> int:
        try:
            configs = load_configs(args.config, resolver=self.registry)
            for cfg in configs:
                resolve_processes(None, cfg)  # what its workers could not share
        except (ConfigError, PluginError) as exc:
            self.error(exc)
            return EXIT_USAGE
        except ValueError as exc:
            self.error(exc)
            return EXIT_USAGE
        for cfg in configs:
            where = "" if cfg.index is None else f"pipelines[{cfg.index}]: "
            print(f"{args.config}: ok ({where}{_describe(cfg)})", file=self.stdout)
        return EXIT_OK

    def plugins(self, args: argparse.Namespace) -> int:
        rows = [("NAME", "KIND", "DISTRIBUTION", "VERSION")]
        rows += [(p.name, p.kind, p.distribution, p.version) for p in self.registry.plugins()]
        widths = [max(len(row[i]) for row in rows) for i in range(3)]
        for row in rows:
            cells = [cell.ljust(width) for cell, width in zip(row[:3], widths, strict=True)]
            print("  ".join([*cells, row[3]]), file=self.stdout)
        return EXIT_OK

    def new_connector(self, args: argparse.Namespace) -> int:
        try:
            root, files = new_connector(
                args.name,
                Path(args.directory),
                args.kind,
                installed_tags=self.registry.names(args.kind),
            )
        except ScaffoldError as exc:
            self.error(exc)
            return EXIT_USAGE
        except OSError as exc:
            self.error(f"cannot write the new package: {exc}")
            return EXIT_FAILED
        print(f"created {root} ({len(files)} files)", file=self.stdout)
        print(
            f"next: pip install -e '{root}[test]' && python -m pytest {root / 'tests'}",
            file=self.stdout,
        )
        return EXIT_OK

    def run(self, args: argparse.Namespace) -> int:
        if len(args.config) > 1:
            return self._run_several(args)
        (config,) = args.config
        slot = WorkerSlot.from_env()
        try:
            configs = load_configs(config, resolver=self.registry)
            if slot is not None and slot.pipeline is not None:
                # A worker of one pipeline of a ``pipelines:`` file (B94).
                configs = [c for c in configs if c.name == slot.pipeline]
                if not configs:
                    raise ConfigError("pipelines", f"no pipeline is named {slot.pipeline!r}")
            elif len(configs) > 1 or configs[0].index is not None:
                return self._run_several(args, configs)
            (cfg,) = configs
            if cfg.sinks_map and args.chain is None:
                raise ConfigError(
                    "sinks",
                    "named sinks need an operator chain to route records to them; "
                    "pass --chain module:function",
                )
            processes = 1 if slot is not None else resolve_processes(args.processes, cfg)
            if processes > 1:
                # Workers load the chain themselves; check it imports before starting them.
                if args.chain is not None:
                    load_chain(args.chain)
                command = worker_command(config, chain=args.chain, log_level=args.log_level)
                return ProcessParent(cfg, processes, command).run()
            if slot is not None:
                slot.label_logs()
                cfg = slot.config(cfg)
                slot.watch_parent()
            chains = load_chain(args.chain) if args.chain is not None else None
            runner = self._runner(cfg, chains, slot)
            if slot is not None:
                slot.gather()  # join the group with the sibling workers (B107)
        except ValueError as exc:
            self.error(exc)
            return EXIT_USAGE
        except (ConfigError, PluginError) as exc:
            self.error(exc)
            return EXIT_USAGE
        except SpateError as exc:
            self.error(exc)
            return EXIT_FAILED
        except Exception as exc:  # a connector's factory failed: one line, no traceback
            logger.debug("building the pipeline failed", exc_info=True)
            self.error(f"{type(exc).__name__}: {one_line(exc)}")
            return EXIT_FAILED
        try:
            if isinstance(runner, Pipeline):
                with progress_bar(runner.source, runner.meter, self.stderr, self.log_handler):
                    report = runner.run()
            else:
                report = runner.run()
        except (ConfigError, PluginError) as exc:
            logger.debug("start-up failed", exc_info=True)
            self._last_words(slot, exc)
            self.error(exc)
            return EXIT_USAGE
        except SpateError as exc:
            # An unreachable endpoint or refused credential, raised before anything is
            # consumed: one line naming it (B29).
            logger.debug("start-up failed", exc_info=True)
            self._last_words(slot, exc)
            self.error(exc)
            return EXIT_FAILED
        except Exception as exc:
            logger.debug("start-up failed", exc_info=True)
            self._last_words(slot, f"{type(exc).__name__}: {one_line(exc)}")
            self.error(f"{type(exc).__name__}: {one_line(exc)}")
            return EXIT_FAILED
        # The runtime logged the summary line when the drain ended.
        if slot is not None:
            slot.report(report)
        if report.exit_code != 0:
            self._last_words(slot, report.reason)
            if isinstance(runner, SupervisedRun) and runner.supervisor.gave_up:
                self.error(report.reason)
        return report.exit_code

    def _run_several(
        self, args: argparse.Namespace, loaded: list[PipelineConfig] | None = None
    ) -> int:
        """Several pipelines (several files, or a ``pipelines:`` list) side by side in
        this process, each under its own parent when it has worker processes (B65,
        B92, B94). The pipelines of one list share their file's admin endpoint."""
        runs: list[_SideBySide] = []
        shared: dict[str, list[tuple[PipelineConfig, _Member]]] = {}
        try:
            return self._side_by_side(args, loaded, runs, shared)
        finally:
            for run in runs:
                if isinstance(run, _ParentRun):
                    run.parent.discard()  # its worker directory, if it never ran

    def _side_by_side(
        self,
        args: argparse.Namespace,
        loaded: list[PipelineConfig] | None,
        runs: list[_SideBySide],
        shared: dict[str, list[tuple[PipelineConfig, _Member]]],
    ) -> int:
        try:
            chains = load_chain(args.chain) if args.chain is not None else None
            configs = loaded if loaded is not None else self._load_all(args.config)
            for cfg in configs:
                path = cfg.file or "<config>"
                if cfg.sinks_map and chains is None:
                    raise ConfigError(
                        "sinks", "named sinks need --chain module:function", file=path
                    )
                processes = resolve_processes(args.processes, cfg)
                serve = cfg.index is None  # a list's pipelines share one endpoint
                run: _SideBySide
                member: _Member
                if processes > 1:
                    command = worker_command(path, chain=args.chain, log_level=args.log_level)
                    parent = ProcessParent(cfg, processes, command, serve_admin=serve)
                    run, member = _ParentRun(parent), (parent, parent.collector())
                else:
                    own = cfg if serve else _without_admin(cfg)
                    built = self._runner(own, chains, None)
                    run, member = built, _member_of(built)
                runs.append(run)
                if not serve:
                    shared.setdefault(path, []).append((cfg, member))
            admins = [_shared_admin(group) for group in shared.values()]
        except ValueError as exc:
            self.error(exc)
            return EXIT_USAGE
        except (ConfigError, PluginError) as exc:
            self.error(exc)
            return EXIT_USAGE
        except Exception as exc:
            logger.debug("building the pipelines failed", exc_info=True)
            self.error(f"{type(exc).__name__}: {one_line(exc)}")
            return EXIT_FAILED
        started: list[AdminServer] = []
        try:
            for admin, health in admins:
                if admin is not None:
                    admin.start(health)
                    started.append(admin)
            reports = run_side_by_side(runs)  # each runtime logs its own summary line
        except ConfigError as exc:  # a shared admin port that cannot be bound
            self.error(exc)
            return EXIT_USAGE
        finally:
            for admin in started:
                admin.stop()
        failed = [r for r in reports if r.exit_code != 0]
        for report in failed:
            self.error(f"pipeline {report.pipeline} failed: {report.reason}")
        return EXIT_FAILED if failed or len(reports) != len(runs) else EXIT_OK

    def _load_all(self, paths: Sequence[str]) -> list[PipelineConfig]:
        """Every pipeline of every file; two pipelines of one run may not share a name."""
        configs: list[PipelineConfig] = []
        names: dict[str, str] = {}
        for path in paths:
            for cfg in load_configs(path, resolver=self.registry):
                if cfg.name in names:
                    raise ConfigError(
                        "pipeline.name",
                        f"{cfg.name!r} names the pipelines of {names[cfg.name]} "
                        f"and {path}; each pipeline of a run needs its own name",
                        file=path,
                    )
                names[cfg.name] = path
                configs.append(cfg)
        return configs

    def _runner(
        self, cfg: PipelineConfig, chains: Callable[[Any], Any] | None, slot: WorkerSlot | None
    ) -> SupervisedRun | Pipeline:
        """A supervised run when the configuration has ``supervisor:``, else one run."""
        if cfg.supervisor is not None:
            return supervise(
                cfg, registry=self.registry, chains=chains, commit_gates=self.commit_gates
            )
        worker = (slot.index, slot.count) if slot is not None else None
        assembly = assemble(
            cfg,
            registry=self.registry,
            chains=chains,
            worker=worker,
            commit_gates=self.commit_gates,
        )
        if slot is not None and assembly.admin is not None:
            # Started after the admin server (services start in order): its port is known.
            admin = assembly.admin
            assembly.pipeline.add_service(lambda _health: slot.announce(admin.url), lambda: None)
        return assembly.pipeline

    @staticmethod
    def _last_words(slot: WorkerSlot | None, why: BaseException | str) -> None:
        if slot is not None:
            slot.last_words(why if isinstance(why, str) else one_line(why))


_Member = tuple[HealthView, Collector]
"""What a shared admin endpoint reads of one pipeline: its health and its metrics."""


class _ParentRun:
    """The parent of one pipeline's worker processes, run side by side with others."""

    def __init__(self, parent: ProcessParent) -> None:
        self.parent = parent

    @property
    def name(self) -> str:
        return self.parent.name

    def request_stop(self, reason: str = "stop requested") -> None:
        self.parent.request_stop(reason)

    def run(self) -> ExitReport:
        code = self.parent.run()
        if code == 0:
            return ExitReport(
                pipeline=self.name, state="completed", reason="every worker completed"
            )
        why = self.parent.give_up_text or "a worker did not complete"
        return ExitReport(pipeline=self.name, state="failed", reason=why)


_SideBySide = SupervisedRun | Pipeline | _ParentRun


def _member_of(run: SupervisedRun | Pipeline) -> _Member:
    if isinstance(run, SupervisedRun):
        return run.supervisor.health, run.supervisor.meter.registry
    return run.health, run.meter.registry


def _without_admin(cfg: PipelineConfig) -> PipelineConfig:
    return dataclasses.replace(cfg, admin=dataclasses.replace(cfg.admin, listen="none"))


def _shared_admin(
    group: Sequence[tuple[PipelineConfig, _Member]],
) -> tuple[AdminServer | None, HealthView]:
    """One admin server for the pipelines of a ``pipelines:`` list (B92): the file's
    ``admin`` and ``metrics`` sections, every pipeline's series, ready when all are."""
    cfg = group[0][0]
    health = AllHealth([(c.name, member[0]) for c, member in group])
    if cfg.admin.listen == "none":
        return None, health
    registry = None
    if cfg.metrics.exporter == "prometheus":
        registry = CollectorRegistry(auto_describe=False)
        registry.register(MergedCollector([member[1] for _, member in group]))
    admin = AdminServer(
        cfg.admin.listen,
        registry=registry,
        stall_after=cfg.admin.stall_after,
        pipeline=",".join(c.name for c, _ in group),
        metrics_auth=cfg.admin.metrics_auth,
    )
    return admin, health


def build_parser(
    registry: Registry, *, describe: bool = False
) -> tuple[argparse.ArgumentParser, dict[str, Any]]:
    """The argument parser, and the contributed commands' subparsers by name.

    ``describe`` (for ``spate --help``) loads each contributed command for its one-line
    help; otherwise none is imported until it is the one run."""
    parser = argparse.ArgumentParser(
        prog="spate", description="At-least-once Kafka to ClickHouse ETL with connector plugins."
    )
    parser.add_argument("--version", action="version", version=f"spate {__version__}")
    parser.add_argument(
        "--log-level", default="info", choices=LEVELS, help="log level (default: info)"
    )
    # --log-level is accepted after the subcommand too; there it overrides the default.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--log-level", default=argparse.SUPPRESS, choices=LEVELS, help="log level (default: info)"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    run = sub.add_parser("run", parents=[common], help="run a pipeline from a configuration file")
    run.add_argument(
        "config",
        nargs="+",
        help="pipeline configuration (YAML); several files, or a file with a pipelines: "
        "list, run their pipelines side by side",
    )
    run.add_argument(
        "--chain",
        metavar="MODULE:FUNCTION",
        help="the operator chain: a function chains(ctx) returning a chain "
        "(required with sinks:; without it decoded records go to the single sink)",
    )
    run.add_argument(
        "--processes",
        metavar="N",
        help="worker processes running each pipeline, or auto for one per usable core "
        "(default: each pipeline's pipeline.processes, 1)",
    )
    validate = sub.add_parser(
        "validate", parents=[common], help="check a configuration file and exit"
    )
    validate.add_argument(
        "config", help="pipeline configuration (YAML), one pipeline or a pipelines: list"
    )
    sub.add_parser(
        "plugins",
        parents=[common],
        help="list installed sources, sinks, deserializers and commands",
    )
    scaffold = sub.add_parser(
        "new-connector",
        parents=[common],
        help="create a connector package from spate's templates (working code and tests)",
    )
    scaffold.add_argument("name", help="connector name, the YAML tag (e.g. parquet)")
    scaffold.add_argument(
        "--kind", default="sink", choices=KINDS, help="kind of plugin (default: sink)"
    )
    scaffold.add_argument(
        "--directory",
        default=".",
        help="where to create the spate-NAME folder (default: the current directory)",
    )
    contributed: dict[str, Any] = {}
    for info in registry.commands():
        if info.name in BUILTIN_COMMANDS or info.name in contributed:
            logger.warning(
                "ignoring command %r from %s: the name is taken", info.name, info.distribution
            )
            continue
        origin = f"(from {info.distribution} {info.version})"
        summary = ""
        if describe:
            try:
                summary = f"{registry.command(info.name).help} "
            except PluginError:
                summary = "(cannot be loaded) "
        contributed[info.name] = sub.add_parser(info.name, parents=[common], help=summary + origin)
    return parser, contributed


def _chosen_command(argv: Sequence[str]) -> str | None:
    """The subcommand named in ``argv``: its first positional argument."""
    skip = False
    for token in argv:
        if skip:
            skip = False
        elif token == "--log-level":
            skip = True
        elif not token.startswith("-"):
            return token
    return None


def main(
    argv: Sequence[str] | None = None,
    *,
    registry: Registry | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Entry point of the ``spate`` console script; returns the exit code."""
    registry = registry if registry is not None else default_registry()
    out = stdout if stdout is not None else sys.stdout
    err = stderr if stderr is not None else sys.stderr
    args_list = list(sys.argv[1:] if argv is None else argv)
    chosen = _chosen_command(args_list)
    parser, contributed = build_parser(registry, describe=chosen is None)
    command = None
    if chosen in contributed:
        # Import the contributed command only when it is the one being run, and let it
        # add its arguments before anything is parsed (so its --help is complete).
        try:
            command = registry.command(chosen)
            contributed[chosen].description = command.help  # shown by `spate NAME --help`
            command.configure(contributed[chosen])
        except PluginError as exc:
            print(one_line(exc), file=err)
            return EXIT_USAGE
    try:
        args = parser.parse_args(args_list)
    except SystemExit as exc:
        return int(exc.code) if isinstance(exc.code, int) else EXIT_USAGE
    handler = configure_logging(args.log_level, err)
    cli = _Cli(registry, out, err, handler)
    if command is not None:
        return command.run(args)
    handlers: dict[str, Callable[[argparse.Namespace], int]] = {
        "run": cli.run,
        "validate": cli.validate,
        "plugins": cli.plugins,
        "new-connector": cli.new_connector,
    }
    return handlers[args.command](args)
