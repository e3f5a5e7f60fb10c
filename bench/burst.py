"""``switchyard bench burst``: N requests published at once; does the log absorb the burst?

Waiting, not refusing (docs/design.md#robustness). Two light mocks (``--latency-ms``, default
20) behind one route, each deployment at ``max_concurrency: 500``
(``--max-concurrency``), the embedded broker and one worker process. After one
warm-up request is answered, ``--requests`` (default 10,000) requests go to
``llm.requests`` as fast as the client can publish; ``llm.responses`` is read
until every one is answered or ``--timeout-s`` (default 300) after the first
publish.

Reported: answered, ok, refused for capacity (``no_candidate``/``exhausted``
because of ``concurrency_full``), deadline errors, other errors (by type/code,
with an example message each); the drain rate (ok per second from the first
publish to the last ok answer, and steady: between the 10th and 90th
percentile of the ok answers); ok latency from publish; the route-state
changelog (records, largest row, the route's last row, the most waiting and
open attempts a row held, breaker states other than CLOSED); the worker's peak
RSS (VmHWM) and CPU seconds over the burst. Output: a markdown table and
``results/burst-n<N>.json``; the worker's log is kept as ``results/burst-worker.log``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import queue_stack as qs
from bench.queue_fates import ChangelogStats, drain_rates, number, percent, summarise

if TYPE_CHECKING:  # imported where used: `switchyard` imports this module at every start
    from app.embedded.stack import EmbeddedStack


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--latency-ms", type=int, default=20, help="the mocks' fixed latency")
    parser.add_argument("--max-concurrency", type=int, default=500, help="per deployment")
    parser.add_argument(
        "--timeout-s", type=float, default=300.0, help="stop reading this long after the burst"
    )
    parser.add_argument("--strategy", default=None, help="BANDIT_STRATEGY (the worker's default)")
    parser.add_argument("--out", type=Path, default=Path("results"))


async def _publish_all(stack: EmbeddedStack, ids: list[str]) -> dict[str, float]:
    """Publish every request back to back; their publish times (epoch s)."""
    from app.client import RequestPublisher

    published: dict[str, float] = {}
    publisher = await RequestPublisher(stack.broker.bootstrap, stack.topics.requests).start()
    try:
        for request_id in ids:
            published[request_id] = time.time()
            await publisher.publish(qs.request_body(request_id))
        await publisher.flush()
    finally:
        await publisher.stop()
    return published


async def burst(args: argparse.Namespace) -> dict[str, Any]:

    env = {"BANDIT_STRATEGY": args.strategy} if args.strategy else {}
    ids = [f"burst-{i:06d}" for i in range(args.requests)]
    async with qs.queue_stack(
        "burst", args.latency_ms, args.max_concurrency, env, args.out
    ) as stack:
        if not await qs.publish_one(stack, "burst-warm-up"):
            raise RuntimeError("the worker answered no warm-up request in 90 s")
        pid = qs.worker_pid(stack)
        ready = qs.worker_usage(pid)
        cpu_before = ready["cpu_s"] or 0.0
        responses = await qs.ResponseLog(stack.broker.bootstrap, stack.topics.responses).start()
        try:
            published = await _publish_all(stack, ids)
            publish_s = time.time() - min(published.values())
            qs.progress("burst", f"published {len(ids)} in {publish_s:.1f}s; reading responses")
            elapsed = time.time() - min(published.values())
            drained = await responses.wait_for(ids, max(0.0, args.timeout_s - elapsed))
            usage = qs.worker_usage(pid, cpu_before)
        finally:
            await responses.stop()
        qs.progress("burst", "reading the route-state changelog")
        changelog = await qs.scan_changelog(stack)
        stats = await qs.bandit_stats(stack)
    report = burst_report(published, responses.first, changelog)
    report.update(
        drained=drained,
        publish_s=publish_s,
        worker={"ready": ready, "after": usage},
        bandit_stats=stats,
        duplicates=sum(n - 1 for i, n in responses.copies.items() if i in published),
        config={k: v for k, v in vars(args).items() if k not in ("run", "out")},
    )
    return report


def burst_report(
    published: dict[str, float], responses: dict[str, dict[str, Any]], changelog: ChangelogStats
) -> dict[str, Any]:
    """The burst's figures from publish times, first responses and the changelog (pure)."""
    summary = summarise(published, responses)
    ok_times = [
        float(responses[i]["_ts"])
        for i in published
        if i in responses and responses[i].get("status") == "ok"
    ]
    start = min(published.values(), default=0.0)
    answered_at = [float(responses[i]["_ts"]) for i in published if i in responses]
    last_answer_s = max(answered_at) - start if answered_at else None
    drain = {**drain_rates(start, ok_times), "last_answer_s": last_answer_s}
    return {**summary, "drain": drain, "changelog": changelog.as_dict()}


def render_burst(report: dict[str, Any]) -> str:
    """The markdown table of a burst report."""
    n, fates = report["requests"], report["fates"]
    drain, log = report["drain"], report["changelog"]
    worker = report.get("worker", {}).get("after", {})
    ready = report.get("worker", {}).get("ready", {})
    latency = report["latency_ms"] or {}
    breakers = ", ".join(f"{d}: {s}" for d, s in log["breaker_rows"].items()) or "none"
    rows = [
        ("answered", f"{report['answered']:,} / {n:,}"),
        ("ok", f"{fates['ok']:,} ({percent(fates['ok'], n)})"),
        ("refused for capacity", f"{fates['refused_capacity']:,}"),
        ("deadline errors", f"{fates['deadline']:,}"),
        ("other errors", f"{fates['other']:,}"),
        ("unanswered", f"{fates['unanswered']:,}"),
        ("error kinds", ", ".join(f"{k} {v}" for k, v in report["error_kinds"].items()) or "–"),
        ("drain rate, ok/s (first publish → last ok)", number(drain["overall"])),
        ("steady rate, ok/s (10th–90th pct of ok answers)", number(drain["steady"])),
        ("first / last ok answer, last answer: s after first publish",
         f"{number(drain['first_ok_s'])} / {number(drain['last_ok_s'])}, "
         f"{number(drain['last_answer_s'])}"),
        ("ok latency from publish p50 / p99 / max, s",
         " / ".join(number(latency.get(q), "{:.1f}", 1e-3) for q in ("p50", "p99", "max"))
         if latency else "–"),
        ("route-state changelog records", f"{log['records']:,} ({log['total_mb']:.0f} MB)"),
        ("largest route-state row", f"{log['max_row_kb']:.1f} KB"),
        ("last route-state row", ", ".join(f"{v:.1f} KB" for v in log["last_row_kb"].values())),
        ("most parked / waiting in the log / open attempts in a row",
         f"{log['max_parked']} / {log.get('max_line_waiting', 0)} / "
         f"{log['max_open_attempts']}"),
        ("changelog rows with a breaker not CLOSED", breakers),
        ("worker RSS ready → peak (VmHWM), MB",
         f"{number(ready.get('rss_mb'), '{:.0f}')} → "
         f"{number(worker.get('peak_rss_mb'), '{:.0f}')}"),
        ("worker CPU s over the burst", number(worker.get("cpu_s"))),
    ]  # fmt: skip
    head = [f"## bench burst: {n:,} requests at once", "", "| | result |", "|---|---|"]
    examples = [f"  e.g. {k}: {m}" for k, m in report["error_examples"].items()]
    return "\n".join(head + [f"| {name} | {value} |" for name, value in rows] + examples)


def run(args: argparse.Namespace) -> int:
    qs.run_and_write(lambda: burst(args), render_burst, args.out / f"burst-n{args.requests}.json")
    return 0
