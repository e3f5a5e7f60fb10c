"""``switchyard bench outage``: the 47-minute outage, time-compressed, on the live stack.

The scenario: docs/design.md#the-47-minute-outage. Four real ``llmock`` servers
stand in for the reference providers (fixed latency per provider, p50 of their
table scaled down); the embedded broker and
``--workers`` worker processes (default 2) route between them. After a steady
phase, the deployment the strategy chose most for first attempts so far
answers 503 to everything for 47 simulated minutes, then recovers. Time is
compressed ``--compression`` times (default 60: a simulated minute is a real
second); the breaker timeouts are compressed with it, so
the router sees the incident as it would unfold in real time.

Printed per strategy: availability, first-try success, time to detect (first
decision excluding the dead deployment), time to recover (first success on it
after it returns), attempts sent to it during the outage, and probes per
breaker timeout (attempts decided after detection, per breaker timeout); and,
in real milliseconds between broker timestamps, how long after the last
failure before the trip the first decision excluding the deployment was made
(the route's state has one writer, so that decision honours the trip whichever
worker ingested the request), with the count of non-probe decisions that still
went to it afterwards. Simulated seconds = real seconds x compression.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from bench.outage_metrics import OutageResult, measure, render

if TYPE_CHECKING:  # imported in run(): `switchyard` imports this module at every start
    from llmock.testing import LLMockServer

    from app.embedded.stack import EmbeddedStack

OUTAGE_MIN = 47.0
BEFORE_MIN = 5.0
AFTER_MIN = 10.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--compression", type=float, default=60.0)
    parser.add_argument("--rate", type=float, default=20.0, help="requests per real second")
    parser.add_argument("--strategies", default="ucb1,composite,adaptive")
    parser.add_argument(
        "--workers", type=int, default=2,
        help="worker processes (requests are ingested and executed by all of them)",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, default=Path("results"))


def _providers_yaml(servers: dict[str, LLMockServer]) -> str:
    from app.embedded.simulated import SEED_003_MODELS

    entries = []
    for model in SEED_003_MODELS:
        entries.append(
            {
                "id": model.provider_id,
                "base_url": servers[model.provider_id].base_url("openai"),
                "cost_per_mtok_input": model.cost_per_mtok_input,
                "cost_per_mtok_output": model.cost_per_mtok_output,
                "max_concurrency": model.max_concurrency,
                "p95_latency_baseline_ms": model.p95_latency_baseline_ms / 20,
                "timeout_ms": 2000,
                "models": [{"name": model.model}],
            }
        )
    ids = [m.provider_id for m in SEED_003_MODELS]
    config = {"providers": entries, "routes": {"chat": {"providers": ids}}, "default_route": "chat"}
    return yaml.safe_dump(config, sort_keys=False)


def _env(strategy: str, compression: float) -> dict[str, str]:
    env = {
        "BANDIT_STRATEGY": strategy,
        "CB_TIMEOUT_S": f"{60.0 / compression:g}",
        "CB_EWMA_OPEN_S": f"{30.0 / compression:g}",
        "SWITCHYARD_TICK_INTERVAL_S": "1",
    }
    if strategy == "composite":
        env["CB_MODE"] = "ewma"
    return env


@dataclass
class _Favourite:
    """Counts first-attempt decisions per deployment while the stack runs."""

    counts: dict[str, int]

    def best(self, order: list[str]) -> str:
        """The most chosen deployment (ties: config order); the first one before any."""
        return max(order, key=lambda d: (self.counts.get(d, 0), -order.index(d)))


async def _count_decisions(bootstrap: str, topic: str, favourite: _Favourite) -> None:
    from app.client import TopicFollower

    follower = await TopicFollower(bootstrap, [topic]).start()
    try:
        while True:
            for record in await follower.poll():
                decision = json.loads(record.value or b"{}")
                if decision.get("attempt") == 1:
                    deployment = decision["deployment"]
                    favourite.counts[deployment] = favourite.counts.get(deployment, 0) + 1
    finally:
        await follower.stop()


async def _drive(
    stack: EmbeddedStack, servers: dict[str, LLMockServer], rate: float, compression: float
) -> tuple[list[str], float, float, str]:
    """Steady phase, outage of the deployment the router favoured so far, recovery."""
    from llmock.scenarios import Fail

    from app.client import RequestPublisher
    from app.embedded.simulated import SEED_003_MODELS

    order = [f"{m.provider_id}:{m.model}" for m in SEED_003_MODELS]
    favourite = _Favourite({})
    counting = asyncio.create_task(
        _count_decisions(stack.broker.bootstrap, stack.topics.decisions, favourite)
    )
    publisher = await RequestPublisher(stack.broker.bootstrap, stack.topics.requests).start()
    ids: list[str] = []
    phases = [(BEFORE_MIN, False), (OUTAGE_MIN, True), (AFTER_MIN, False)]
    marks: list[float] = []
    dead = order[0]
    try:
        for minutes, down in phases:
            if down:
                dead = favourite.best(order)
                servers[dead.split(":")[0]].state.scenarios.add(Fail(503, times=None))
            else:
                servers[dead.split(":")[0]].state.scenarios.clear()
            marks.append(time.time())
            end = time.monotonic() + minutes * 60.0 / compression
            while time.monotonic() < end:
                request_id = f"outage-{len(ids):06d}"
                ids.append(request_id)
                body = {"request_id": request_id, "messages": [{"role": "user", "content": "hi"}]}
                await publisher.publish(body)
                await asyncio.sleep(1.0 / rate)
        await publisher.flush()
    finally:
        await publisher.stop()
        counting.cancel()
    return ids, marks[1], marks[2], dead


async def run_one(strategy: str, args: argparse.Namespace) -> OutageResult:
    from llmock.chaos import ChaosSettings
    from llmock.testing import LLMockServer

    from app.client import all_answered, read_topics
    from app.embedded.simulated import SEED_003_MODELS
    from app.embedded.stack import EmbeddedStack

    servers = {
        m.provider_id: LLMockServer(chaos=ChaosSettings(latency_ms=round(m.p50_ms / 20)))
        for m in SEED_003_MODELS
    }
    for server in servers.values():
        server.start()
    try:
        stack = EmbeddedStack(
            env=_env(strategy, args.compression), providers_yaml=_providers_yaml(servers)
        )
        async with stack:
            for _ in range(args.workers - 1):
                stack.add_worker()
            await _warm_up(stack, settle_s=8.0 if args.workers > 1 else 0.0)
            ids, start, end, dead = await _drive(stack, servers, args.rate, args.compression)
            topics = stack.topics
            records = await read_topics(
                stack.broker.bootstrap,
                [topics.responses, topics.decisions, topics.outcomes],
                all_answered(ids, topics.responses),
                timeout_s=120,
                stamp=True,
            )
            args.out.mkdir(parents=True, exist_ok=True)
            dump = {"outage": [start, end], "records": records}
            (args.out / f"outage-{strategy}-records.json").write_text(json.dumps(dump))
            return measure(
                strategy,
                records,
                stack.topics,
                ids,
                (start, end),
                args.compression,
                dead,
                args.workers,
            )
    finally:
        for server in servers.values():
            server.stop()


async def _warm_up(stack: EmbeddedStack, settle_s: float) -> None:
    """Wait until the workers answer, so the steady phase measures a running router.

    With several workers the later ones join the group after the first answers; a
    second request after ``settle_s`` (past the session timeout) sees the settled group.
    """
    from app.client import RequestPublisher, all_answered, read_topics

    for round_ in range(2 if settle_s else 1):
        await asyncio.sleep(settle_s if round_ else 0.0)
        request_id = f"warm-up-{round_}"
        publisher = await RequestPublisher(stack.broker.bootstrap, stack.topics.requests).start()
        try:
            await publisher.publish(
                {"request_id": request_id, "messages": [{"role": "user", "content": "hi"}]}
            )
            await publisher.flush()
        finally:
            await publisher.stop()
        topic = stack.topics.responses
        await read_topics(
            stack.broker.bootstrap, [topic], all_answered([request_id], topic), 90, linger_s=0.0
        )


def run(args: argparse.Namespace) -> int:
    results = [asyncio.run(run_one(s, args)) for s in args.strategies.split(",")]
    print(
        f"outage: each strategy's favourite deployment down {OUTAGE_MIN:g} "
        "simulated minutes, "
        f"compression {args.compression:g}x, {args.workers} worker(s) "
        "(times below are simulated seconds, except trip → all workers: real ms)"
    )
    print(render(results))
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "outage.json"
    path.write_text(json.dumps([asdict(r) for r in results], indent=2), encoding="utf-8")
    print(f"wrote {path}")
    return 0
