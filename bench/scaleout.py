"""``switchyard bench scaleout``: workers join and leave under steady traffic; 2 workers vs 1.

Workers join and leave and nothing waits forever (docs/design.md#robustness). Three
light mocks (``--latency-ms``, default 20; each its own
process on 127.0.0.1) serve three deployments on every one of ``--routes``
routes (default 12), whose names are picked so that their keys land on distinct
partitions of the 12-partition routing log: the routes spread evenly over the
workers that own the partitions.

*steady*: one worker, ``--rate`` requests per second (default 40) spread over
the routes for ``--duration`` seconds (default 100). During it, at fixed shares
of the duration: a 2nd and a 3rd worker join, ``mock-c`` goes down (its
process stops: connection refused), the first worker is SIGKILLed, the second
SIGTERMed, ``mock-c`` comes back. Then, from the topics: every request
answered (lost ids get their trail, as ``bench crash`` prints it), duplicate
responses (same id), every route's breaker trip honoured (no decision to the
dead deployment after the trip other than half-open probes, by broker
timestamps, as ``bench outage`` measures), and a replay of the whole log
(decisions and responses re-derived and compared exactly).

*burst*: a fresh stack with one worker; ``--burst-requests`` (default 3,000)
published at once over the routes; then as many to one route (the single
writer's rate); then a 2nd worker joins and the first burst is repeated. Per
burst: ok/s, CPU seconds of each worker, of the broker, the mocks and this
process (from ``/proc``), and each worker's peak RSS.

Every phase stops by itself; every process stops at the end, on error, Ctrl-C
or SIGTERM. Output: a markdown table and ``results/scaleout.json``; the
workers' logs as ``results/scaleout-<phase>-worker-<i>.log``. Two shared cores
run the broker, the mocks, this driver and the workers: numbers are noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import queue_stack as qs
from bench.cluster_report import replay_responses
from bench.scaleout_metrics import (
    Step,
    answers,
    breaker_per_route,
    burst_summary,
    pick_routes,
    render,
    routes_by_partition,
    schedule,
)
from bench.scaleout_stack import (
    PROVIDERS,
    cpu_now,
    live_pids,
    peak_rss,
    publish,
    rig,
    scaleout_stack,
    stalls,
    warm_up,
)

if TYPE_CHECKING:  # imported where used: `switchyard` imports the benches at every start
    from app.audit.log import RecordedLog
    from app.embedded.stack import EmbeddedStack
    from bench.throughput.mocks import MockServer

DEAD = PROVIDERS[-1]
Mocks = dict[str, "MockServer"]


def _worker_env(args: argparse.Namespace) -> dict[str, str]:
    env = {"SWITCHYARD_EXACTLY_ONCE": "1"} if args.exactly_once else {}
    if args.standby_replicas is not None:
        env["SWITCHYARD_TABLE_STANDBY_REPLICAS"] = str(args.standby_replicas)
    return env


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from app.embedded.brokers import add_broker_flag

    add_broker_flag(parser)
    parser.add_argument("--phases", default="steady,burst", help="steady, burst or both")
    parser.add_argument(
        "--exactly-once",
        action="store_true",
        help="workers write in transactions (SWITCHYARD_EXACTLY_ONCE; Apache Kafka only); "
        "the topics are read read_committed",
    )
    parser.add_argument("--routes", type=int, default=12)
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--latency-ms", type=int, default=20, help="the mocks' fixed latency")
    parser.add_argument("--rate", type=float, default=40.0, help="steady requests per second")
    parser.add_argument("--duration", type=float, default=100.0, help="steady load, seconds")
    parser.add_argument("--breaker-timeout-s", type=float, default=5.0, help="CB_TIMEOUT_S")
    parser.add_argument("--burst-requests", type=int, default=3000)
    parser.add_argument(
        "--single-route-requests", type=int, default=3000, help="burst on one route (0: none)"
    )
    parser.add_argument("--settle-s", type=float, default=15.0, help="after the 2nd worker joins")
    parser.add_argument("--drain-timeout-s", type=float, default=180.0)
    parser.add_argument("--trail-limit", type=int, default=5)
    parser.add_argument(
        "--standby-replicas", type=int, default=None, help="SWITCHYARD_TABLE_STANDBY_REPLICAS"
    )
    parser.add_argument("--out", type=Path, default=Path("results"))


# --------------------------------------------------------------------------- steady


async def _take(stack: EmbeddedStack, mocks: Mocks, step: Step) -> None:
    if step.action == "add":
        stack.add_worker()
    elif step.action == "kill":
        await asyncio.to_thread(stack.workers[step.worker or 0].kill)
    elif step.action == "stop":
        await asyncio.to_thread(stack.workers[step.worker or 0].stop)
    elif step.action == "outage":
        await asyncio.to_thread(mocks[DEAD].stop)
    elif step.action == "recover":
        await asyncio.to_thread(mocks[DEAD].start)
    else:
        raise ValueError(f"unknown step {step.action!r}")


async def _run_steps(
    stack: EmbeddedStack, mocks: Mocks, duration_s: float, done: list[dict[str, Any]]
) -> None:
    started = time.monotonic()
    for at, step in schedule(duration_s):
        await asyncio.sleep(max(0.0, started + at - time.monotonic()))
        before = time.time()
        await _take(stack, mocks, step)
        done.append(
            {"label": step.label(), "at_s": time.monotonic() - started, "began": before,
             "ended": time.time()}
        )  # fmt: skip
        qs.progress("scaleout", f"+{done[-1]['at_s']:.1f}s {step.label()}")


def _outage_window(steps: list[dict[str, Any]]) -> tuple[float, float]:
    """From the moment the dead mock had stopped to the moment it was being started again."""
    down = next(s["ended"] for s in steps if s["label"] == "outage")
    back = next((s["began"] for s in steps if s["label"] == "recover"), time.time())
    return down, back


async def steady(args: argparse.Namespace, mocks: Mocks, routes: list[str]) -> dict[str, Any]:
    from app.client import all_answered, read_topics
    from app.config.providers import deployment_id
    from bench.throughput.workload import MOCK_MODEL

    env = {"CB_TIMEOUT_S": f"{args.breaker_timeout_s:g}"}
    async with scaleout_stack(
        "steady",
        mocks,
        routes,
        partitions=args.partitions,
        env={**env, **_worker_env(args)},
        out=args.out,
        broker=args.broker,
    ) as stack:
        if not await warm_up(stack, routes, "steady", 90.0):
            raise RuntimeError("the worker answered no warm-up request in 90 s")
        count = int(args.rate * args.duration)
        items = [(f"so-{i:06d}", routes[i % len(routes)]) for i in range(count)]
        ids = [request_id for request_id, _ in items]
        steps: list[dict[str, Any]] = []
        qs.progress("scaleout", f"steady: {count} requests at {args.rate:g}/s over {len(routes)}")
        started = time.time()
        await asyncio.gather(
            publish(stack, items, args.rate), _run_steps(stack, mocks, args.duration, steps)
        )
        qs.progress("scaleout", "steady: published; reading the topics")
        t = stack.topics
        records = await read_topics(
            stack.broker.bootstrap,
            [t.responses, t.decisions, t.outcomes],
            all_answered(ids, t.responses),
            timeout_s=args.drain_timeout_s,
            linger_s=3.0,
            stamp=True,
            read_committed=args.exactly_once,
        )
        got = answers(ids, records[t.responses])
        outage = _outage_window(steps)
        dead = deployment_id(DEAD, MOCK_MODEL)  # decisions and outcomes name deployments
        breaker = breaker_per_route(records[t.decisions], records[t.outcomes], routes, dead, outage)
        qs.progress("scaleout", "steady: replaying the whole log")
        replayed, fold, placement = await _replay(stack, env, args.trail_limit)
        trail = got["lost_ids"][: args.trail_limit] + [
            m["request_id"] for m in replayed["first_mismatches"][: args.trail_limit]
        ]
        if trail and args.trail_limit > 0:
            from bench.crash import print_trails

            marks = [s["began"] for s in steps]
            await print_trails(stack, sorted(set(trail)), started, marks)
        stalled = stalls(stack)
    report = {
        "rate": args.rate,
        "duration_s": args.duration,
        "routes": len(routes),
        "partitions": args.partitions,
        "steps": [
            {**s, "began": s["began"] - started, "ended": s["ended"] - started} for s in steps
        ],
        "outage_window_s": [outage[0] - started, outage[1] - started],
        "answers": got,
        "breaker": breaker,
        "replay": replayed,
        "route_partitions": placement,
        "rebalance_stalls": stalled,
    }
    return {"steady": report, "fold": fold}


def _route_of(event: Any) -> str | None:
    route = getattr(event, "route", None)
    if route is None:
        route = getattr(getattr(event, "outcome", None), "route", None)
    return None if route is None else str(route)


async def _replay(
    stack: EmbeddedStack, env: dict[str, str], trail_limit: int
) -> tuple[dict[str, Any], dict[str, Any], dict[str, list[int]]]:
    """Replay the whole recorded log with the workers' policy; also time the pure fold."""
    from app.audit.log import read_broker
    from app.audit.replay import rederive, replay
    from app.policy.files import load_config
    from app.routing.params import RoutingParams
    from app.routing.policy import Policy

    log = await read_broker(stack.broker.bootstrap, stack.topics, timeout_s=300.0)
    params = RoutingParams(**env)  # type: ignore[arg-type]  # aliases, as the worker reads them
    policy = Policy(config=load_config(stack.providers_file, env={}), params=params)
    cpu = time.process_time()
    folded = rederive(log.routing, policy)
    cpu = time.process_time() - cpu
    fold = {
        "events": folded.events,
        "decisions": len(folded.decisions),
        "cpu_s": cpu,
        "events_per_cpu_s": folded.events / cpu if cpu > 0 else None,
        "decisions_per_cpu_s": len(folded.decisions) / cpu if cpu > 0 else None,
    }
    report = replay(log, policy, allow_pending=True)
    summary = _replay_summary(report.to_json(limit=trail_limit), log)
    for mismatch in report.mismatches[:trail_limit]:
        print(
            f"  replay {mismatch.kind} {mismatch.record} {mismatch.request_id}#{mismatch.attempt}"
            f" at routing[{mismatch.origin}]: {'; '.join(mismatch.differences[:3])}"
        )
    placement = routes_by_partition((e.partition, _route_of(e.event)) for e in log.routing)
    return summary, fold, placement


def _replay_summary(data: dict[str, Any], log: RecordedLog) -> dict[str, Any]:
    return {
        "ok": data["ok"],
        "decisions": {
            "recorded": data["decisions"],
            "reproduced": data["reproduced"],
            "mismatched": data["mismatched"],
        },
        **replay_responses(data),
        "routing_events": data["routing_events"],
        "skipped_duplicates": data["skipped_duplicates"],
        "fold_errors": data["fold_errors"],
        "truncated_partitions": data["truncated_partitions"],
        "first_mismatches": data["first_mismatches"],
        "log": log.counts(),
    }


# --------------------------------------------------------------------------- burst


async def _burst(
    stack: EmbeddedStack, mocks: Mocks, name: str, items: list[tuple[str, str]], timeout_s: float
) -> dict[str, Any]:
    pids = live_pids(stack, mocks)
    qs.progress("scaleout", f"burst '{name}': {len(items)} requests, {len(pids) - 2} worker(s)")
    responses = await qs.ResponseLog(stack.broker.bootstrap, stack.topics.responses).start()
    try:
        before = cpu_now(pids)
        published = await publish(stack, items)
        await responses.wait_for([i for i, _ in items], timeout_s)
        after = cpu_now(pids)
    finally:
        await responses.stop()
    first = {i: responses.first[i] for i in published if i in responses.first}
    cpu = {role: after[role] - before[role] for role in after}
    return {"name": name, **burst_summary(published, first, cpu, peak_rss(pids))}


async def bursts(
    args: argparse.Namespace, mocks: Mocks, routes: list[str], results: list[dict[str, Any]]
) -> None:
    """The bursts, appended to ``results`` as they finish (kept if a later one fails)."""

    def spread(tag: str, over: list[str], n: int) -> list[tuple[str, str]]:
        return [(f"{tag}-{i:06d}", over[i % len(over)]) for i in range(n)]

    async with scaleout_stack(
        "burst",
        mocks,
        routes,
        partitions=args.partitions,
        env=_worker_env(args),
        out=args.out,
        broker=args.broker,
    ) as stack:
        if not await warm_up(stack, routes, "burst-1", 90.0):
            raise RuntimeError("the worker answered no warm-up request in 90 s")
        n, timeout = args.burst_requests, args.drain_timeout_s
        items = spread("b1", routes, n)
        results.append(await _burst(stack, mocks, "all routes, 1 worker", items, timeout))
        if args.single_route_requests > 0:
            one = spread("b1one", routes[:1], args.single_route_requests)
            results.append(await _burst(stack, mocks, f"one route ({routes[0]})", one, timeout))
        stack.add_worker()
        qs.progress("scaleout", f"2nd worker joined; settling {args.settle_s:g} s")
        await asyncio.sleep(args.settle_s)
        settled = await warm_up(stack, routes, "burst-2", 90.0)
        results.append({"name": "stalls before the 2-worker burst", "stalls": stalls(stack)})
        if not settled:
            raise RuntimeError("two workers answered no warm-up request in 90 s")
        items = spread("b2", routes, n)
        results.append(await _burst(stack, mocks, "all routes, 2 workers", items, timeout))


# --------------------------------------------------------------------------- run


async def scaleout(args: argparse.Namespace) -> dict[str, Any]:
    # The fold as the workers load it now, not as a later edit of the tree would make it.
    import app.audit.replay  # noqa: F401
    from bench.throughput.procfs import load_average

    phases = {p.strip() for p in args.phases.split(",") if p.strip()}
    routes = pick_routes(args.routes, args.partitions)
    report: dict[str, Any] = {"routes": routes, "load_average_start": load_average()}
    errors: dict[str, str] = {}
    workdir = Path(tempfile.mkdtemp(prefix="switchyard-scaleout-mocks-"))
    try:
        async with rig(args.latency_ms, workdir) as mocks:
            if "steady" in phases:
                try:
                    report.update(await steady(args, mocks, routes))
                except Exception as exc:  # report what was measured; the next phase still runs
                    errors["steady"] = f"{type(exc).__name__}: {exc}"
            if "burst" in phases:
                try:
                    await bursts(args, mocks, routes, report.setdefault("bursts", []))
                except Exception as exc:
                    errors["burst"] = f"{type(exc).__name__}: {exc}"
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    report["errors"] = errors
    report["load_average_end"] = load_average()
    report["config"] = {k: v for k, v in vars(args).items() if k not in ("run", "out")}
    return report


def passed(report: dict[str, Any]) -> bool:
    """0 lost, replay clean, no leak past a trip, every burst fully answered."""
    steady = report.get("steady")
    ok = not report.get("errors")
    ok = ok and all(b["answered"] == b["requests"] for b in report.get("bursts", []) if "ok" in b)
    if steady is not None:
        ok = ok and steady["answers"]["lost"] == 0 and bool(steady["replay"]["ok"])
        ok = ok and steady["breaker"]["leaked_after_trip"] == 0
    return ok


def run(args: argparse.Namespace) -> int:
    report = qs.run_and_write(lambda: scaleout(args), render, args.out / "scaleout.json")
    return 0 if passed(report) else 1
