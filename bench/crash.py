"""``switchyard bench crash``: SIGKILL the worker several times under load; count what was lost.

Publishes ``--requests`` requests at ``--rate`` per second to a one-worker
embedded stack (simulated seed-003 providers, time-compressed), kills the
worker with SIGKILL ``--kills`` times at even intervals and restarts it at
once (same local state directory). Then checks, from the topics alone:
every request answered, how many responses were duplicates, and whether the
bandit's total pulls equal the number of distinct attempt outcomes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported in run(): `switchyard` imports this module at every start
    from app.embedded.stack import EmbeddedStack


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=50.0, help="requests per second")
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("results"))


async def _publish(stack: EmbeddedStack, ids: list[str], rate: float) -> None:
    from app.client import RequestPublisher

    publisher = await RequestPublisher(stack.broker.bootstrap, stack.topics.requests).start()
    started = time.monotonic()
    try:
        for index, request_id in enumerate(ids):
            delay = started + index / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            body = {"request_id": request_id, "messages": [{"role": "user", "content": "hi"}]}
            await publisher.publish(body)
        await publisher.flush()
    finally:
        await publisher.stop()


async def _kill_periodically(stack: EmbeddedStack, kills: int, span_s: float) -> None:
    for _ in range(kills):
        await asyncio.sleep(span_s / (kills + 1))
        worker = stack.workers[0]
        worker.kill()
        print(f"  SIGKILL worker at +{time.monotonic():.0f}", flush=True)
        worker.start()


async def _total_pulls(port: str) -> int:
    import httpx

    async with httpx.AsyncClient() as client:
        stats = (await client.get(f"http://127.0.0.1:{port}/admin/bandit/stats", timeout=5)).json()
    return sum(arm["pulls"] for route in stats.values() for arm in route.values())


async def crash(args: argparse.Namespace) -> dict[str, Any]:
    from app.client import read_topics
    from app.embedded.stack import EmbeddedStack

    ids = [f"crash-{i:06d}" for i in range(args.requests)]
    async with EmbeddedStack(time_scale=0.05, seed=11) as stack:
        span = args.requests / args.rate
        await asyncio.gather(
            _publish(stack, ids, args.rate), _kill_periodically(stack, args.kills, span)
        )
        wanted = set(ids)
        topics = stack.topics

        def done(records: dict[str, list[dict[str, Any]]]) -> bool:
            return wanted <= {r["request_id"] for r in records[topics.responses]}

        records = await read_topics(
            stack.broker.bootstrap, [topics.responses, topics.outcomes], done, timeout_s=300
        )
        port = stack.workers[0].env["SWITCHYARD_WEB_PORT"]
        outcome_ids = {o["id"] for o in records[topics.outcomes]}
        pulls = 0
        for _ in range(60):
            pulls = await _total_pulls(port)
            if pulls >= len(outcome_ids):
                break
            await asyncio.sleep(1)
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
        "statuses": dict(statuses),
        "distinct_attempt_outcomes": len(outcome_ids),
        "bandit_pulls": pulls,
    }


def run(args: argparse.Namespace) -> int:
    result = asyncio.run(crash(args))
    for key, value in result.items():
        print(f"{key:>26}: {value}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "crash.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    ok = result["lost"] == 0 and result["bandit_pulls"] == result["distinct_attempt_outcomes"]
    return 0 if ok else 1
