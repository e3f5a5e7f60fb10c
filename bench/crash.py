"""``switchyard bench crash``: SIGKILL the worker several times under load; count what was lost.

Publishes ``--requests`` requests at ``--rate`` per second to a one-worker
embedded stack (simulated seed-003 providers, time-compressed), kills the
worker with SIGKILL ``--kills`` times at even intervals and restarts it at
once (same local state directory). Then checks, from the topics alone:
every request answered, how many responses were duplicates, and whether the
bandit's total pulls equal the number of distinct attempt outcomes that are not
neutral (the reliability accounting: a client error, a 429, a passed deadline is no pull).

Every unanswered request gets its trail printed: each record that names it on
every topic (partition, offset, log time relative to the start of the run),
the route-state changelog rows around it, and the kill times.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections import Counter
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.pacing import paced

if TYPE_CHECKING:  # imported in run(): `switchyard` imports this module at every start
    from app.embedded.stack import EmbeddedStack, Worker


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from app.embedded.brokers import add_broker_flag

    add_broker_flag(parser)
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=50.0, help="requests per second")
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument(
        "--exactly-once",
        action="store_true",
        help="workers write in transactions (SWITCHYARD_EXACTLY_ONCE; Apache Kafka only); "
        "the topics are read read_committed and every duplicate record is counted",
    )
    parser.add_argument("--out", type=Path, default=Path("results"))
    parser.add_argument(
        "--trail-limit", type=int, default=5, help="print the trail of at most this many lost ids"
    )


async def _publish(stack: EmbeddedStack, ids: list[str], rate: float) -> None:
    from app.client import RequestPublisher

    publisher = await RequestPublisher(stack.broker.bootstrap, stack.topics.requests).start()
    try:
        async for _, request_id in paced(ids, rate):
            body = {"request_id": request_id, "messages": [{"role": "user", "content": "hi"}]}
            await publisher.publish(body)
        await publisher.flush()
    finally:
        await publisher.stop()


async def _kill_periodically(
    stack: EmbeddedStack, kills: int, span_s: float, started: float, kill_times: list[float]
) -> None:
    for _ in range(kills):
        await asyncio.sleep(span_s / (kills + 1))
        worker = stack.workers[0]
        worker.kill()
        kill_times.append(time.time())
        print(f"  SIGKILL worker at +{kill_times[-1] - started:.3f}s", flush=True)
        worker.start()


async def _total_pulls(worker: Worker) -> int:
    import httpx

    url = f"{worker.web_url}/admin/bandit/stats"
    async with httpx.AsyncClient(headers=worker.admin_headers) as client:
        stats = (await client.get(url, timeout=5)).json()
    return sum(arm["pulls"] for route in stats.values() for arm in route.values())


def _neutral(status_class: object) -> bool:
    from app.contract import StatusClass
    from app.routing.reliability import ACCOUNTING, Availability

    known = {s.value: s for s in StatusClass}
    status = known.get(str(status_class))
    return status is not None and ACCOUNTING[status].availability is Availability.NEUTRAL


async def crash(args: argparse.Namespace) -> dict[str, Any]:
    from app.client import all_answered, read_topics
    from app.embedded.stack import EmbeddedStack
    from bench.replay_check import replay_whole_log

    ids = [f"crash-{i:06d}" for i in range(args.requests)]
    kill_times: list[float] = []
    env = {"SWITCHYARD_EXACTLY_ONCE": "1"} if args.exactly_once else {}
    async with EmbeddedStack(time_scale=0.05, seed=11, broker_kind=args.broker, env=env) as stack:
        span = args.requests / args.rate
        started = time.time()
        await asyncio.gather(
            _publish(stack, ids, args.rate),
            _kill_periodically(stack, args.kills, span, started, kill_times),
        )
        wanted = set(ids)
        topics = stack.topics
        records = await read_topics(
            stack.broker.bootstrap,
            [topics.responses, topics.outcomes, topics.decisions, topics.deadletter],
            all_answered(ids, topics.responses),
            timeout_s=300,
            read_committed=args.exactly_once,
        )
        providers = stack.providers
        calls = sum(providers.stats(p).requests for p in providers.provider_ids)
        # A neutral outcome (a passed deadline, a client error, a 429) is never a pull.
        outcome_ids = {
            o["id"] for o in records[topics.outcomes] if not _neutral(o.get("status_class"))
        }
        pulls = 0
        for _ in range(60):
            pulls = await _total_pulls(stack.workers[0])
            if pulls >= len(outcome_ids):
                break
            await asyncio.sleep(1)
        answered_ids = {r["request_id"] for r in records[topics.responses]}
        lost_ids = sorted(wanted - answered_ids)
        # Attempts the router gave up on (deadline + grace): an outcome that came
        # later is not counted as a pull, so they explain pulls < outcomes.
        expired_ids = sorted(
            {
                r["request_id"]
                for r in records[topics.responses]
                if (r.get("error") or {}).get("type") == "lost"
            }
        )
        print("  replaying the whole log", flush=True)
        replayed = await replay_whole_log(stack)
        traced = lost_ids[: args.trail_limit]
        if pulls != len(outcome_ids):
            traced += expired_ids[: args.trail_limit]
        if traced and args.trail_limit > 0:
            await print_trails(stack, traced, started, kill_times)
    per_request = Counter(r["request_id"] for r in records[topics.responses])
    statuses = Counter(
        r["status"] if r["status"] == "ok" else f"error:{(r.get('error') or {}).get('code')}"
        for r in records[topics.responses]
    )
    return {
        "requests": len(ids),
        "kills": args.kills,
        "answered": len(wanted & set(per_request)),
        "lost": len(wanted - set(per_request)),
        "duplicate_responses": sum(n - 1 for n in per_request.values()),
        "duplicate_decisions": _duplicates(records[topics.decisions]),
        "duplicate_outcomes": _duplicates(records[topics.outcomes]),
        "exactly_once": args.exactly_once,
        "provider_calls": calls,
        "statuses": dict(statuses),
        "expired_attempt_responses": len(expired_ids),
        "dead_letters": dict(Counter(d.get("reason") for d in records[topics.deadletter])),
        "distinct_attempt_outcomes": len(outcome_ids),
        "bandit_pulls": pulls,
        "kills_at_s": [round(t - started, 3) for t in kill_times],
        "replay": replayed,
        "lost_ids": lost_ids[:100],
    }


def _duplicates(records: list[dict[str, Any]]) -> int:
    """Records whose id an earlier record of the topic had."""
    return len(records) - len({r["id"] for r in records})


def changelog_topic(stack: EmbeddedStack) -> str:
    """Faust names a table's changelog ``<app id>-<table>-changelog``."""
    app_id = stack.worker_env(0)["SWITCHYARD_APP_ID"]
    return f"{app_id}-route-state-changelog"


def _describe(topic: str, value: dict[str, Any], request_id: str) -> str:
    kind = value.get("type", "?")
    if kind == "attempt.finished":
        outcome = value.get("outcome") or {}
        return f"{kind} attempt={outcome.get('attempt')} {outcome.get('status_class')}"
    if kind in ("routing.decision", "attempt.outcome"):
        return f"{kind} attempt={value.get('attempt')} {value.get('deployment')}"
    if kind == "attempt.dispatch":
        return f"{kind} attempt={(value.get('decision') or {}).get('attempt')}"
    if kind == "?" and topic.endswith("requests"):
        return "request"
    if kind == "chat.response":
        return f"{kind} {value.get('status')} attempts={value.get('attempts')}"
    if kind == "request.accepted":
        return f"{kind} source={value.get('source')}"
    return str(kind)


async def print_trails(
    stack: EmbeddedStack, lost: list[str], started: float, kill_times: list[float]
) -> None:
    """Print where each lost request shows up, on every topic and in the changelog."""
    from app.client import read_raw

    t = stack.topics
    names = [t.requests, t.routing, t.decisions, t.dispatch, t.outcomes, t.responses]
    names += [t.deadletter, changelog_topic(stack)]
    records = await read_raw(stack.broker.bootstrap, names, timeout_s=300)
    changelog: dict[int, list[tuple[int, float, dict[str, Any]]]] = {}
    for record in records:
        if record.topic == names[-1] and record.value:
            row = json.loads(record.value)
            changelog.setdefault(record.partition, []).append(
                (record.offset, record.timestamp / 1000.0, row)
            )
    for rows in changelog.values():
        rows.sort(key=lambda item: item[0])
    print(f"  kills at: {', '.join(f'+{k - started:.3f}s' for k in kill_times)}")
    _print_changelog_gaps(records, names, changelog, started)
    for request_id in lost:
        print(f"  trail of {request_id}:")
        needle = f'"{request_id}"'.encode()
        routing_at: list[tuple[int, int]] = []
        for record in sorted(records, key=lambda r: (r.timestamp, r.topic, r.offset)):
            if record.topic == names[-1] or needle not in (record.value or b""):
                continue
            value = json.loads(record.value or b"{}")
            when = record.timestamp / 1000.0 - started
            print(
                f"    +{when:9.3f}s {record.topic}[{record.partition}]@{record.offset}: "
                f"{_describe(record.topic, value, request_id)}"
            )
            if record.topic == t.routing:
                routing_at.append((record.partition, record.offset))
        for partition, offset in routing_at:
            rows = changelog.get(partition, [])
            before = [r for r in rows if r[2].get("position", -1) < offset]
            after = [r for r in rows if r[2].get("position", -1) >= offset]
            for label, row in (("last row before", before[-1:]), ("first row from", after[:1])):
                for cl_offset, when, state in row:
                    open_keys = [
                        k
                        for k in state.get("open_attempts", {})
                        if k.rpartition("#")[0] == request_id
                    ]
                    print(
                        f"    changelog[{partition}]@{cl_offset} (+{when - started:.3f}s) "
                        f"{label} routing@{offset}: position={state.get('position')} "
                        f"open={open_keys}"
                    )


def _print_changelog_gaps(
    records: list[Any],
    names: list[str],
    changelog: dict[int, list[tuple[int, float, dict[str, Any]]]],
    started: float,
) -> None:
    """Routing-log events that were folded but whose row never reached the changelog.

    The router writes one row per event, so consecutive changelog rows of a
    partition have consecutive positions. A jump means the rows in between were
    written to the local store only; for the events in the jump, say whether their
    sends (decisions for accepted requests, responses for finished attempts) exist.
    """
    routing_topic, decisions_topic, responses_topic = names[1], names[2], names[5]
    routing: dict[tuple[int, int], dict[str, Any]] = {}
    decided: set[str] = set()
    answered: set[str] = set()
    for record in records:
        if record.topic == routing_topic:
            routing[(record.partition, record.offset)] = json.loads(record.value or b"{}")
        elif record.topic == decisions_topic:
            decided.add(json.loads(record.value or b"{}").get("request_id", ""))
        elif record.topic == responses_topic:
            answered.add(json.loads(record.value or b"{}").get("request_id", ""))
    for partition, rows in sorted(changelog.items()):
        for (_, t_prev, prev), (cl_offset, t_next, nxt) in pairwise(rows):
            first, last = prev.get("position", -1) + 1, nxt.get("position", -1) - 1
            if last < first:
                continue
            kinds: Counter[str] = Counter()
            for position in range(first, last + 1):
                event = routing.get((partition, position), {})
                kind = event.get("type", "missing")
                if kind == "request.accepted":
                    request_id = event["request"]["request_id"]
                    kind += " decided" if request_id in decided else " NOT decided"
                elif kind == "attempt.finished":
                    kind += (
                        " answered"
                        if event["outcome"]["request_id"] in answered
                        else (" NOT answered")
                    )
                kinds[kind] += 1
            print(
                f"  changelog[{partition}] no row for routing positions {first}..{last} "
                f"(last row +{t_prev - started:.3f}s, next row @{cl_offset} "
                f"+{t_next - started:.3f}s): {dict(kinds)}"
            )


def run(args: argparse.Namespace) -> int:
    result = asyncio.run(crash(args))
    for key, value in result.items():
        print(f"{key:>26}: {value}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "crash.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    ok = result["lost"] == 0 and result["bandit_pulls"] == result["distinct_attempt_outcomes"]
    ok = ok and result["replay"]["ok"]
    if args.exactly_once:
        duplicates = ("duplicate_responses", "duplicate_decisions", "duplicate_outcomes")
        ok = ok and all(result[name] == 0 for name in duplicates)
    return 0 if ok else 1
