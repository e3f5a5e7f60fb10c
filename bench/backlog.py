"""``switchyard bench backlog``: the worker stopped under steady load, then restarted.

Deadlines and blame (docs/design.md#robustness). Two light mocks (20 ms) behind one route, each
deployment at ``max_concurrency: 500``, the embedded broker and one worker
process. Requests go to ``llm.requests`` at ``--rate`` (default 20/s, on a fixed
schedule) for the whole run: ``--warm-up-s`` (30) with the worker up, then the
worker is stopped (SIGTERM; ``--kill``: SIGKILL) and restarted ``--outage-s``
(150) after the signal, then ``--after-s`` (60) more. Then ``llm.responses`` is
read until every request is answered or ``--drain-s`` (150) passed.

Reported, per phase of publication (before the stop, during the outage, after
the restart): ok / deadline / refused for capacity / other / unanswered; the
requests whose deadline (``--deadline-s``, 120, after publish) had not passed at
the restart and how many of them were ok (goal: all); the requests published
after the restart: ok share, latency from publish, and how long after the
restart the first request was published from which every later one was ok
(goal: ≤ 10 s); breakers: attempt outcomes per deployment and status class
(``llm.outcomes``), exclusions per deployment and reason (``llm.decisions``,
e.g. ``breaker_open``), breaker states other than CLOSED in the route-state
changelog (when first, after the restart), and ``/admin/bandit/stats`` at the
end. Output: markdown tables and ``results/backlog-<signal>.json``; the worker's
log is kept as ``results/backlog-worker.log``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import queue_stack as qs
from bench.pacing import paced
from bench.queue_fates import (
    ChangelogStats,
    exclusion_counts,
    number,
    outcome_counts,
    outcome_latency_ms,
    percent,
    summarise,
)

if TYPE_CHECKING:  # imported where used: `switchyard` imports this module at every start
    from app.embedded.stack import EmbeddedStack

PHASES = ("before", "outage", "after")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rate", type=float, default=20.0, help="requests per second")
    parser.add_argument("--warm-up-s", type=float, default=30.0)
    parser.add_argument("--outage-s", type=float, default=150.0, help="worker down this long")
    parser.add_argument("--after-s", type=float, default=60.0, help="publishing after restart")
    parser.add_argument("--drain-s", type=float, default=150.0, help="most wait for answers")
    parser.add_argument("--kill", action="store_true", help="SIGKILL the worker, not SIGTERM")
    parser.add_argument(
        "--deadline-s", type=float, default=120.0, help="SWITCHYARD_REQUEST_DEADLINE_S"
    )
    parser.add_argument("--latency-ms", type=int, default=20, help="the mocks' fixed latency")
    parser.add_argument("--max-concurrency", type=int, default=500, help="per deployment")
    parser.add_argument("--strategy", default=None, help="BANDIT_STRATEGY (the worker's default)")
    parser.add_argument("--out", type=Path, default=Path("results"))


@dataclass(frozen=True)
class Timeline:
    """Epoch seconds: the stop signal, the old worker gone, the new one started."""

    stop_at: float
    stopped_at: float
    restart_at: float
    deadline_s: float
    exit_code: int | None = None

    def phase(self, published: float) -> str:
        if published < self.stop_at:
            return "before"
        return "outage" if published < self.restart_at else "after"


async def _publish_steady(
    stack: EmbeddedStack, rate: float, seconds: float, published: dict[str, float]
) -> None:
    """Request *i* at *i / rate* s after the start, for ``seconds``; publish times kept."""
    from app.client import RequestPublisher

    publisher = await RequestPublisher(stack.broker.bootstrap, stack.topics.requests).start()
    try:
        async for index, _ in paced(range(int(seconds * rate)), rate):
            request_id = f"backlog-{index:06d}"
            published[request_id] = time.time()
            await publisher.publish(qs.request_body(request_id))
        await publisher.flush()
    finally:
        await publisher.stop()


async def _outage(stack: EmbeddedStack, args: argparse.Namespace) -> dict[str, Any]:
    """Stop the worker after the warm-up, start it again ``outage_s`` after the signal; the
    times, and the old worker's exit code (-9: SIGKILLed, also after a SIGTERM not obeyed
    within 20 s)."""
    await asyncio.sleep(args.warm_up_s)
    worker = stack.workers[0]
    stop_at = time.time()
    qs.progress("backlog", f"stopping the worker ({'SIGKILL' if args.kill else 'SIGTERM'})")
    await asyncio.to_thread(worker.kill if args.kill else worker.stop)
    stopped_at = time.time()
    exit_code = worker.process.returncode if worker.process is not None else None
    await asyncio.sleep(max(0.0, stop_at + args.outage_s - time.time()))
    worker.start()
    qs.progress("backlog", f"worker restarted ({stopped_at - stop_at:.1f}s to stop)")
    return {
        "stop_at": stop_at,
        "stopped_at": stopped_at,
        "restart_at": time.time(),
        "exit_code": exit_code,
    }


async def backlog(args: argparse.Namespace) -> dict[str, Any]:
    from app.client import read_raw

    env = {"SWITCHYARD_REQUEST_DEADLINE_S": f"{args.deadline_s:g}"}
    if args.strategy:
        env["BANDIT_STRATEGY"] = args.strategy
    name = "backlog"
    async with qs.queue_stack(name, args.latency_ms, args.max_concurrency, env, args.out) as stack:
        if not await qs.publish_one(stack, "backlog-warm-up"):
            raise RuntimeError("the worker answered no warm-up request in 90 s")
        responses = await qs.ResponseLog(stack.broker.bootstrap, stack.topics.responses).start()
        published: dict[str, float] = {}
        try:
            span = args.warm_up_s + args.outage_s + args.after_s
            _, marks = await asyncio.gather(
                _publish_steady(stack, args.rate, span, published), _outage(stack, args)
            )
            qs.progress(
                "backlog", f"published {len(published)}; draining (at most {args.drain_s:g}s)"
            )
            drained = await responses.wait_for(list(published), args.drain_s)
            usage = qs.worker_usage(qs.worker_pid(stack))
        finally:
            await responses.stop()
        topics = stack.topics
        raw = await read_raw(stack.broker.bootstrap, [topics.outcomes, topics.decisions])
        changelog = await qs.scan_changelog(stack)
        stats = await qs.bandit_stats(stack)
    records: dict[str, list[dict[str, Any]]] = {topics.outcomes: [], topics.decisions: []}
    for record in raw:
        records[record.topic].append(json.loads(record.value or b"{}"))
    timeline = Timeline(**marks, deadline_s=args.deadline_s)
    report = backlog_report(
        published, responses.first, timeline, records[topics.outcomes], changelog
    )
    report.update(
        drained=drained,
        exclusions=exclusion_counts(records[topics.decisions]),
        bandit_stats=stats,
        worker_after=usage,
        config={k: v for k, v in vars(args).items() if k not in ("run", "out")},
    )
    return report


def all_ok_after_s(new: list[tuple[float, bool]], restart_at: float) -> float | None:
    """Seconds from the restart to the first request (by publish time) after which every
    request was ok; None when the last one was not ok (or there were none)."""
    ordered = sorted(new)
    if not ordered or not ordered[-1][1]:
        return None
    last_bad = max((i for i, (_, ok) in enumerate(ordered) if not ok), default=-1)
    return max(0.0, ordered[last_bad + 1][0] - restart_at)


def backlog_report(
    published: dict[str, float],
    responses: dict[str, dict[str, Any]],
    timeline: Timeline,
    outcomes: list[dict[str, Any]],
    changelog: ChangelogStats,
) -> dict[str, Any]:
    """Every figure of a backlog run from its records (pure)."""
    by_phase = {p: {i: t for i, t in published.items() if timeline.phase(t) == p} for p in PHASES}
    alive = {  # published before the restart, deadline still ahead when it came
        i: t for i, t in published.items() if t < timeline.restart_at < t + timeline.deadline_s
    }
    new = by_phase["after"]
    oks = [(t, responses.get(i, {}).get("status") == "ok") for i, t in new.items()]
    first_ok = min(
        (float(r["_ts"]) for r in responses.values()
         if r.get("status") == "ok" and float(r["_ts"]) >= timeline.restart_at),
        default=None,
    )  # fmt: skip
    opened = {
        d: {s: at - timeline.restart_at for s, at in states.items()}
        for d, states in changelog.breaker_first_at.items()
    }
    return {
        "timeline": asdict(timeline),
        "phases": {p: summarise(ids, responses) for p, ids in by_phase.items()},
        "alive_at_restart": summarise(alive, responses),
        "after_restart": {
            "all_ok_after_s": all_ok_after_s(oks, timeline.restart_at),
            "first_ok_answer_s": None if first_ok is None else first_ok - timeline.restart_at,
        },
        "outcomes": outcome_counts(outcomes),
        "outcome_latency_ms": outcome_latency_ms(outcomes),
        "breaker_not_closed_s_after_restart": opened,
        "changelog": changelog.as_dict(),
    }


def _fate_row(name: str, summary: dict[str, Any]) -> str:
    f, n = summary["fates"], summary["requests"]
    latency = summary["latency_ms"] or {}
    p50 = number(latency.get("p50"), "{:.0f}")
    p99 = number(latency.get("p99"), "{:.0f}")
    return (
        f"| {name} | {n:,} | {f['ok']:,} ({percent(f['ok'], n)}) | {f['deadline']:,} "
        f"| {f['refused_capacity']:,} | {f['other']:,} | {f['unanswered']:,} | {p50} / {p99} |"
    )


def render_backlog(report: dict[str, Any]) -> str:
    """The markdown tables of a backlog report."""
    t, after = report["timeline"], report["after_restart"]
    outage = t["restart_at"] - t["stop_at"]
    lines = [
        f"## bench backlog: worker down {outage:.0f}s (stopped in "
        f"{t['stopped_at'] - t['stop_at']:.1f}s, exit code {t.get('exit_code')}), "
        f"deadline {t['deadline_s']:g}s",
        "",
        "| published | requests | ok | deadline | refused (capacity) | other | unanswered "
        "| ok latency p50 / p99 ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [_fate_row(p, report["phases"][p]) for p in PHASES]
    lines.append(_fate_row("deadline not passed at restart", report["alive_at_restart"]))
    lines += [
        "",
        f"after the restart: first ok answer {number(after['first_ok_answer_s'])} s; "
        f"every request ok from {number(after['all_ok_after_s'])} s (goal ≤ 10 s)",
        "",
        "| deployment | outcomes by status class | excluded by decisions | breaker not CLOSED "
        "(s after restart) | breaker at the end |",
        "|---|---|---|---|---|",
    ]
    final = {d: a.get("breaker") for r in (report.get("bandit_stats") or {}).values()
             for d, a in r.items()}  # fmt: skip
    breakers = report["breaker_not_closed_s_after_restart"]
    named = (report["outcomes"], report.get("exclusions", {}), final, breakers)
    for d in sorted(set().union(*named)):
        opened = breakers.get(d, {})
        lines.append(
            f"| {d} | {_pairs(report['outcomes'].get(d, {}))} "
            f"| {_pairs(report.get('exclusions', {}).get(d, {}))} "
            f"| {_pairs({s: f'{v:+.1f}' for s, v in opened.items()})} | {final.get(d, '–')} |"
        )
    latency = {c: f"{v['p50']:.0f}/{v['max']:.0f}" for c, v in report["outcome_latency_ms"].items()}
    lines += ["", f"outcome latency p50/max ms by status class: {_pairs(latency)}"]
    for phase in PHASES:
        lines.append(f"  {phase} errors: {_pairs(report['phases'][phase]['error_kinds'])}")
        examples = report["phases"][phase]["error_examples"].items()
        lines += [f"  {phase}, e.g. {kind}: {message}" for kind, message in examples]
    return "\n".join(lines)


def _pairs(counts: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in counts.items()) or "–"


def run(args: argparse.Namespace) -> int:
    name = f"backlog-{'sigkill' if args.kill else 'sigterm'}.json"
    qs.run_and_write(lambda: backlog(args), render_backlog, args.out / name)
    return 0
