"""The ``replay`` and ``audit`` subcommands (wired up in :mod:`app.cli`), and the log
and policy options the ``export`` command shares (app/analytics/export_command.py).

Exit codes: 0 done (replay: every decision reproduced), 1 replay found a
discrepancy or audit found no such request, 2 the log or the policy could not
be read.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Collection
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from app.audit.log import STREAMS, Keep, RecordedLog, read_broker, read_export
from app.kafka import bootstrap_servers
from app.policy.files import load_config
from app.routing.params import RoutingParams, params_from_env
from app.routing.policy import Policy
from app.settings import get_settings

if TYPE_CHECKING:
    from app.audit.log_texts import ExportTexts, LogTexts

PARAM_NAMES = sorted(str(f.validation_alias) for f in RoutingParams.model_fields.values())


class UsageError(Exception):
    """Bad arguments or an unreadable log: reported in one line, exit code 2."""


def add_source_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--broker", help="host:port of the Kafka cluster (default: SWITCHYARD_BROKER)"
    )
    source.add_argument(
        "--from-export", type=Path, metavar="DIR", help="read a `switchyard export` directory"
    )
    parser.add_argument(
        "--timeout", type=float, default=120.0, help="seconds to read the topics (broker)"
    )


def add_policy_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--providers",
        type=Path,
        metavar="FILE",
        help="providers file (default: SWITCHYARD_PROVIDERS)",
    )


def load_log(
    args: argparse.Namespace,
    only_request: str | None = None,
    streams: Collection[str] = STREAMS,
    keep: Keep | None = None,
) -> RecordedLog:
    try:
        if args.from_export is not None:
            return read_export(args.from_export, only_request, streams, keep)
        settings = get_settings()
        bootstrap = bootstrap_servers(args.broker or settings.broker)
        return asyncio.run(
            read_broker(
                bootstrap,
                settings.topics,
                only_request=only_request,
                streams=streams,
                timeout_s=args.timeout,
                keep=keep,
            )
        )
    except (OSError, LookupError, TimeoutError, ValueError) as exc:
        raise UsageError(f"cannot read the recorded log: {exc}") from exc


def load_policy(
    providers: Path | None,
    overrides: dict[str, str] | None = None,
    export: Path | None = None,
) -> Policy:
    """The policy to replay with.

    ``providers`` given: that file and RoutingParams from the environment (as the
    worker has them). Otherwise an export's ``policy.json`` when there is one.
    Otherwise SWITCHYARD_PROVIDERS and the environment. ``overrides`` change
    parameters on top (counterfactual ``--set``).
    """
    try:
        if providers is None and export is not None:
            from app.audit.export import read_policy

            exported = read_policy(export, overrides)
            if exported is not None:
                return exported
        path = providers if providers is not None else get_settings().providers
        # The CLI is where the process starts: the environment, as the worker has it.
        params = params_from_env({**os.environ, **(overrides or {})})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise UsageError(f"routing parameter {where}: {first['msg']}") from None
    return Policy(config=load_config(path), params=params)


def parse_overrides(pairs: list[str]) -> dict[str, str]:
    overrides: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or name not in PARAM_NAMES:
            raise UsageError(
                f"--set {pair!r}: expected NAME=VALUE with NAME in {', '.join(PARAM_NAMES)}"
            )
        overrides[name] = value
    return overrides


# --------------------------------------------------------------------------- replay


#: ``--jobs`` unset: a routing log shorter than this is folded in the command's own
#: process. Starting the workers (a fresh interpreter each) costs about half a second,
#: which they win back from about this many records on (bench/replay_speed.py).
PARALLEL_FROM = 40_000


def replay_command(args: argparse.Namespace) -> int:
    from app.audit.log_texts import REPLAY_STREAMS, UnreadableLog
    from app.audit.replay_parallel import FoldPool

    overrides = parse_overrides(args.set or [])
    counterfactual_mode = bool(args.config or overrides or args.counterfactual)
    jobs = replay_jobs(args.jobs)
    with ExitStack() as workers:
        pool = None
        if jobs > 1 and not counterfactual_mode and args.jobs is not None:
            pool = workers.enter_context(FoldPool(jobs))
            pool.warm()  # the workers start while the log is read
        # Outcomes are in the routing log too; replay checks the router's own responses.
        if jobs > 1 and not counterfactual_mode:
            log: RecordedLog | LogTexts | ExportTexts = load_texts(args)  # the workers parse
        else:
            log = load_log(args, streams=REPLAY_STREAMS)
        export = None if args.counterfactual else args.from_export
        policy = load_policy(args.config or args.providers, overrides, export)
        if counterfactual_mode:
            from app.audit.counterfactual import counterfactual
            from app.audit.side_by_side import render as render_side_by_side

            assert isinstance(log, RecordedLog)
            label = (
                ", ".join(
                    [f"config {args.config}"] * bool(args.config)
                    + [f"{k}={v}" for k, v in overrides.items()]
                )
                or "policy from the environment"
            )
            report = counterfactual(log, policy, label, runs=args.runs)
            _emit(args, report.to_json(), render_side_by_side(report))
            return 0

        from app.audit.replay import render, replay

        big = not isinstance(log, RecordedLog) and log.routing_records() >= PARALLEL_FROM
        if pool is None and jobs > 1 and big:
            pool = workers.enter_context(FoldPool(jobs))
            pool.warm()  # the workers start while the parent reads the routing log's keys
        try:
            result = replay(log, policy, allow_pending=args.allow_pending, pool=pool)
        except (OSError, UnreadableLog) as exc:  # a file of the export, read as it replays
            raise UsageError(f"cannot read the recorded log: {exc}") from exc
        _emit(args, result.to_json(limit=args.show), render(result, show=args.show))
        return 0 if result.ok else 1


def load_texts(args: argparse.Namespace) -> LogTexts | ExportTexts:
    """:func:`load_log` for a parallel replay: the records' texts, parsed by its workers."""
    from app.audit.log_texts import read_broker_texts, read_export_texts

    try:
        if args.from_export is not None:
            return read_export_texts(args.from_export)
        settings = get_settings()
        bootstrap = bootstrap_servers(args.broker or settings.broker)
        return asyncio.run(read_broker_texts(bootstrap, settings.topics, timeout_s=args.timeout))
    except (OSError, LookupError, TimeoutError, ValueError) as exc:
        raise UsageError(f"cannot read the recorded log: {exc}") from exc


def replay_jobs(requested: int | None) -> int:
    """``--jobs``: worker processes for the re-derivation (unset: one per core for a log
    of ``PARALLEL_FROM`` routing records or more; the replay uses no more than the log
    has independent routes)."""
    if requested is None:
        return os.cpu_count() or 1
    if requested < 1:
        raise UsageError(f"--jobs {requested}: expected 1 or more")
    return requested


def _emit(args: argparse.Namespace, data: dict[str, Any], text: str) -> None:
    if args.json:
        print(json.dumps(data, sort_keys=True, default=str))
    else:
        print(text)


# --------------------------------------------------------------------------- audit


def audit_command(args: argparse.Namespace) -> int:
    from app.audit.explain import also_read, build_trace, render

    reproduced: dict[str, bool] | None = None
    if args.verify:
        from app.audit.replay import replay

        log = load_log(args)
        report = replay(log, load_policy(args.providers, export=args.from_export))
        failed = {m.event_id for m in report.mismatches}
        reproduced = {e.event.id: e.event.id not in failed for e in log.decisions if e.event}
    else:
        log = load_log(args, only_request=args.request_id, keep=also_read)
    trace = build_trace(log, args.request_id, reproduced)
    if trace is None:
        print(
            f"switchyard: no record of request {args.request_id!r} in {log.source}", file=sys.stderr
        )
        return 1
    _emit(args, trace, render(trace))
    return 0


def register(commands: Any) -> None:
    """Add ``replay`` and ``audit`` to ``switchyard``'s subparsers."""
    replay = commands.add_parser(
        "replay",
        help="re-derive every recorded decision from the routing log (or compare another policy)",
    )
    add_source_arguments(replay)
    add_policy_arguments(replay)
    replay.add_argument(
        "--config", type=Path, metavar="ALT.yaml", help="counterfactual: this providers file"
    )
    replay.add_argument(
        "--set",
        action="append",
        metavar="NAME=VALUE",
        help=f"counterfactual: override a routing parameter ({', '.join(PARAM_NAMES)})",
    )
    replay.add_argument(
        "--counterfactual",
        action="store_true",
        help="counterfactual with the policy from the environment/--providers as it is",
    )
    replay.add_argument("--runs", type=int, default=5, help="counterfactual: seeded runs")
    replay.add_argument(
        "--allow-pending",
        action="store_true",
        help="do not fail on outputs of the last events a live router has not published yet",
    )
    replay.add_argument("--show", type=int, default=5, help="mismatches shown in detail")
    replay.add_argument(
        "--jobs",
        type=int,
        metavar="N",
        help="fold independent routes in N worker processes (default: one per core for a "
        f"log of {PARALLEL_FROM:,} routing records or more, at most one per route; "
        "1: in this process)",
    )
    replay.add_argument("--json", action="store_true", help="one JSON document instead of text")
    replay.set_defaults(run=guarded(replay_command))

    audit = commands.add_parser("audit", help="explain one request's attempts")
    audit.add_argument("request_id")
    add_source_arguments(audit)
    add_policy_arguments(audit)
    audit.add_argument(
        "--verify", action="store_true", help="also replay the log and mark each decision"
    )
    audit.add_argument("--json", action="store_true", help="the trace as JSON")
    audit.set_defaults(run=guarded(audit_command))


def guarded(command: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        try:
            return int(command(args))
        except UsageError as exc:
            print(f"switchyard: {exc}", file=sys.stderr)
            return 2
        except BrokenPipeError:  # `switchyard audit X | head`
            sys.stderr.close()
            return 0

    return run
