"""The ``switchyard`` command."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from app.config.schema import ConfigError
from app.routing.params import Strategy
from app.settings import SETTINGS_MODELS, describe_error, get_settings

if TYPE_CHECKING:
    from app.embedded.local_model import LocalModelServer
    from app.embedded.local_providers import LocalModelChoice
    from app.embedded.simulated import SimulatedProviders


def _worker(_: argparse.Namespace) -> int:
    from app import log_hygiene

    log_hygiene.install()  # before anything logs a record: values become their size
    _trace("switchyard-worker")
    _detect_fetch_holding()
    from agents import executor, feedback, handoff, ingest, policy, router, web
    from agents.app import app as faust_app
    from agents.app import settings
    from app.kafka import ensure_topics
    from app.policy.document import document_from_file
    from app.policy.holder import policy_holder
    from app.policy.log import bootstrap
    from app.worker.faust_app import SwitchyardWorker, changelog_topics

    # Importing them builds the Faust app and registers the agents, tables and views.
    registered = (executor, feedback, handoff, ingest, router, web)
    assert registered
    policy_holder().load()  # fail fast, with one clear line, on a bad providers file
    # The tables' changelogs exist before the consumer first joins (app/kafka.py).
    changelogs = changelog_topics(faust_app, settings.partitions)
    asyncio.run(ensure_topics(settings, changelogs=changelogs))
    document = document_from_file(settings.providers, settings.routing)
    policy.adopt(asyncio.run(bootstrap(settings, document, policy_holder().book)))
    _make_data_dir(settings.data_dir)
    worker = SwitchyardWorker(faust_app, loglevel=settings.log_level, quiet=True)
    worker.execute_from_commandline()
    return 0


def _trace(service_name: str) -> None:
    """Trace this process when the ``OTEL_*`` variables ask for an exporter
    (docs/operations.md, "Tracing"); a variable asking for what cannot be had: one line,
    exit code 2."""
    from app.telemetry.setup import TracingConfigError, configure

    try:
        configure(service_name)
    except TracingConfigError as exc:
        print(f"switchyard: bad setting {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def _detect_fetch_holding() -> None:
    """Unless told, find out whether the broker holds fetches (Tansu): before the app is built.

    Without the short fetch wait such a broker costs seconds per hop, silently.
    """
    if "SWITCHYARD_TANSU_COMPAT" in os.environ:
        return
    from app.compat.detect import broker_holds_fetches
    from app.kafka import bootstrap_servers

    settings = get_settings()
    bootstrap = bootstrap_servers(settings.broker)
    probe = broker_holds_fetches(bootstrap, settings.topics.probe, settings.replication_factor)
    if asyncio.run(probe):
        print(
            "switchyard: the broker holds every fetch for its whole wait (Tansu): "
            "SWITCHYARD_TANSU_COMPAT turned on",
            file=sys.stderr,
        )
        os.environ["SWITCHYARD_TANSU_COMPAT"] = "1"
        get_settings.cache_clear()


def _make_data_dir(path: Path) -> None:
    """Faust makes the data dir itself, not its parents: a relative one may lack them."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"SWITCHYARD_DATA_DIR: cannot create {path}: {exc.strerror}") from None


def _demo(args: argparse.Namespace) -> int:
    from app import demo

    get_settings()  # a bad SWITCHYARD_* setting: one line, before anything starts
    local = _local_choice(args)
    # A 135M model on 2 shared CPU cores decodes ~55 tokens/s (its F16 weights, beside the
    # judge's server, the broker and the worker): far less load, and the time to send it.
    requests = args.requests if args.requests is not None else (30 if local else 500)
    rate = args.rate if args.rate is not None else (0.25 if local else 40.0)
    timeout = (
        args.timeout if args.timeout is not None else (requests / rate + 60 if local else 150.0)
    )
    return demo.main(
        requests,
        rate,
        args.seed,
        args.json,
        timeout,
        args.strategy,
        args.export,
        local,
        broker=args.broker,
    )


def _local_choice(args: argparse.Namespace) -> LocalModelChoice | None:
    """``--local-model``'s choice, or None; a missing package is a one-line error."""
    if not args.local_model:
        return None
    from app.embedded.local_model import missing_reason
    from app.embedded.local_providers import LocalModelChoice

    reason = missing_reason()
    if reason is not None:
        raise ConfigError(f"--local-model: {reason}")
    return LocalModelChoice(threshold=args.local_threshold, judge_sample_rate=args.local_judge)


def _local_stack(
    choice: LocalModelChoice | None,
) -> tuple[list[LocalModelServer], Callable[[SimulatedProviders], str] | None]:
    """``EmbeddedStack``'s ``local_models`` and ``providers_yaml`` for ``choice``."""
    if choice is None:
        return [], None
    from app.embedded.local_providers import local_stack

    return local_stack(choice)


def _add_local_model_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--local-model",
        action="store_true",
        help="also run SmolLM2-135M on llama-server, asked first (local-first)",
    )
    parser.add_argument(
        "--local-threshold",
        type=float,
        default=0.75,
        help="keep the local answer at this confidence or above (default 0.75)",
    )
    parser.add_argument(
        "--local-judge",
        type=float,
        default=0.0,
        metavar="SHARE",
        help="with --local-model: the local model grades this share of answers (default 0)",
    )


def _up(args: argparse.Namespace) -> int:
    from app.embedded.up import UpOptions, run_up, user_providers

    settings = get_settings()  # a bad SWITCHYARD_* setting: one line, before anything starts
    if args.providers is not None and args.local_model:
        raise ConfigError("--providers and --local-model do not go together")
    # A bad providers file: one line, before anything starts.
    providers_text = None if args.providers is None else user_providers(args.providers, settings)
    local_models, providers_yaml = _local_stack(_local_choice(args))
    options = UpOptions(
        seed=args.seed,
        gateway_port=args.gateway_port,
        api_key=args.api_key,
        ready_timeout_s=args.ready_timeout,
        providers_text=providers_text,
        broker=args.broker,
    )
    _trace("switchyard-gateway")  # up's own process serves the gateway; workers trace themselves
    return run_up(settings, options, local_models, providers_yaml)


def _gateway(args: argparse.Namespace) -> int:
    from app.gateway.run import hash_key_from_stdin, serve

    if args.hash_key:
        return hash_key_from_stdin()
    settings = get_settings()
    _trace("switchyard-gateway")
    asyncio.run(serve(settings))
    return 0


def _schemas(args: argparse.Namespace) -> int:
    from app import schemas

    stale = schemas.write_or_check(check=args.check)
    if stale and args.check:
        print("stale schemas: " + ", ".join(stale), file=sys.stderr)
        return 1
    if stale:
        print("wrote " + ", ".join(stale))
    return 0


#: ``switchyard bench NAME``: a module of the repository's ``bench/`` package with
#: ``add_arguments(parser)`` and ``run(args) -> int``. One line adds a benchmark.
#: Every ``switchyard`` start imports these modules: keep their top-level imports light.
BENCHMARKS: dict[str, tuple[str, str]] = {
    "quality": ("bench.quality", "routing quality of every policy in simulated scenarios"),
    "outage": ("bench.outage", "the 47-minute outage of the favourite deployment, live (llmock)"),
    "crash": ("bench.crash", "SIGKILL the worker under load; count what was lost"),
    "throughput": ("bench.throughput", "one worker's throughput and overhead vs LiteLLM"),
    "hops": ("bench.hops", "where a request's added time goes, stage by stage, in µs"),
    "poison": ("bench.poison", "10,030 malformed records among 1,000 valid: dead letters, crashes"),
    "burst": ("bench.burst", "N requests at once to one worker: refused, drained, state size"),
    "backlog": ("bench.backlog", "stop the worker under load, restart it: fates, breakers"),
    "realdata": ("bench.realdata", "graded prompts through the live router: quality, cost, pacer"),
    "feedback": ("bench.feedback_storm", "10,000 feedback (a third bad) with live traffic: lost"),
    "scaleout": ("bench.scaleout", "workers join and leave under traffic; replay; 2 workers vs 1"),
    "gateway": ("bench.gateway", "the gateway's added latency and saturation vs the mock direct"),
    "local_model": (
        "bench.local_model",
        "SmolLM2-135M on llama-server: tokens/s, local-first hits",
    ),
    "reload": ("bench.reload", "3 policy changes under traffic on 2 workers; versions, replay"),
    "trace": ("bench.trace", "/admin/trace latency from the analytics store: 1,000 vs 100,000"),
    "affinity": ("bench.affinity", "cache/session affinity: hit rate and cost on 4 deployments"),
    "cache": ("bench.cache", "response cache on paraphrases: hit rate, cost saved, wrong hits"),
    "record_cost": (
        "bench.record_cost",
        "CPU of one consumed and one sent record in a Faust agent",
    ),
    "faults": ("bench.faults", "16 provider faults through the gateway: rescued, errors, hangs"),
    "local_outage": (
        "bench.local_outage",
        "local-first with the local model up, stopped, started again: who answered, how fast",
    ),
    "cluster": ("bench.cluster", "SIGKILL or pause one of 3 Kafka nodes under load: lost, ISR"),
}


def _bench(args: argparse.Namespace) -> int:
    if args.bench_unavailable:
        print(f"switchyard bench {args.benchmark}: {args.bench_unavailable}", file=sys.stderr)
        return 2
    return int(importlib.import_module(BENCHMARKS[args.benchmark][0]).run(args))


def _add_bench(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], arguments: bool
) -> None:
    """``bench`` and its benchmarks; ``arguments``: with each one's own options (importing
    its module, and the SDKs it uses: only when a benchmark is what is asked for)."""
    bench = commands.add_parser("bench", help="run a benchmark (needs the bench/ package)")
    kinds = bench.add_subparsers(dest="benchmark", required=True)
    for name, (module, help_text) in BENCHMARKS.items():
        kind = kinds.add_parser(name, help=help_text)
        kind.set_defaults(run=_bench, bench_unavailable=None)
        if not arguments:
            continue
        try:
            importlib.import_module(module).add_arguments(kind)
        except ImportError as exc:  # installed without bench/, or without its extra
            kind.set_defaults(bench_unavailable=f"unavailable ({exc})")


def build_parser(benches: bool = True) -> argparse.ArgumentParser:
    """``switchyard``'s parser; ``benches=False``: the benchmarks listed without their
    options (their modules are not imported), for any command but ``bench``."""
    from app.embedded.brokers import add_broker_flag

    parser = argparse.ArgumentParser(prog="switchyard", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    worker = commands.add_parser("worker", help="run a worker against SWITCHYARD_BROKER")
    worker.set_defaults(run=_worker)

    demo = commands.add_parser("demo", help="run the whole path on the embedded stack")
    demo.add_argument(
        "--requests", type=int, default=None, help="default 500 (30 with --local-model)"
    )
    demo.add_argument(
        "--rate", type=float, default=None, help="requests per second: 40 (0.25 with --local-model)"
    )
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="seconds before giving up: 150 (with --local-model: the sending time + 60)",
    )
    demo.add_argument("--json", action="store_true", help="also print one JSON summary line")
    demo.add_argument("--strategy", choices=[s.value for s in Strategy], default=None)
    demo.add_argument(
        "--export", type=Path, default=None, help="write the recorded log here before stopping"
    )
    _add_local_model_flags(demo)
    add_broker_flag(demo)
    demo.set_defaults(run=_demo)

    up = commands.add_parser("up", help="run the embedded stack in the foreground")
    up.add_argument("--seed", type=int, default=0)
    up.add_argument("--gateway-port", type=int, default=0, help="the gateway's port (0: any)")
    up.add_argument("--api-key", default=None, help="the gateway's API key (default: printed)")
    up.add_argument(
        "--providers",
        type=Path,
        default=None,
        metavar="FILE",
        help="route to the providers this file names (a copy of it; no simulated providers)",
    )
    up.add_argument(
        "--ready-timeout",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="how long the worker may take to answer ready (default 120)",
    )
    _add_local_model_flags(up)
    add_broker_flag(up)
    up.set_defaults(run=_up)

    gateway = commands.add_parser(
        "gateway", help="the OpenAI-compatible HTTP gateway (SWITCHYARD_GATEWAY_*)"
    )
    gateway.add_argument(
        "--hash-key", action="store_true", help="print the SHA-256 of an API key read from stdin"
    )
    gateway.set_defaults(run=_gateway)

    schemas = commands.add_parser("schemas", help="write the event JSON Schemas to schemas/")
    schemas.add_argument("--check", action="store_true", help="only report stale files")
    schemas.set_defaults(run=_schemas)

    from app.audit.commands import register

    register(commands)  # replay, audit
    from app.analytics.export_command import register as register_export

    register_export(commands)  # export (the recorded streams, or the analytics tables)
    from app.analytics.commands import register as register_analytics

    register_analytics(commands)  # analytics (the sink)
    from app.console.commands import register as register_console

    register_console(commands)  # console (sink and pages)
    from app.policy.commands import register as register_policy

    register_policy(commands)  # policy apply, policy history
    from app.audit.streams import register as register_streams

    register_streams(commands)  # streams: streamed answers reassembled from the deltas topic
    from app.credentials.commands import register as register_credentials

    register_credentials(commands)  # credentials new-key, credentials seal
    _add_bench(commands, benches)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(benches=given[:1] == ["bench"]).parse_args(given)
    try:
        return int(args.run(args))
    except ConfigError as exc:
        print(f"switchyard: configuration error: {exc}", file=sys.stderr)
        return 2
    except ValidationError as exc:
        if exc.title not in SETTINGS_MODELS:
            raise
        print(f"switchyard: bad setting {describe_error(exc)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
