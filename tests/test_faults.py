"""Faults injected into a live stack: failing providers, a killed worker, a frozen broker.

For each: every accepted request is answered exactly once, no outcome is counted
twice (bandit pulls == distinct attempt outcomes), and traffic leaves the failing
deployment (and comes back when it recovers).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator
from typing import Any

import pytest
from stack_helpers import bandit_stats, chat, publish, running_stack, total_pulls

from app.client import TopicFollower
from app.embedded.broker import EmbeddedBroker
from app.embedded.stack import EmbeddedStack

pytestmark = pytest.mark.broker

VICTIM = "gemini-2.5-flash"
VICTIM_DEPLOYMENT = "gemini-2.5-flash:gemini-2.5-flash"


@pytest.fixture
async def faulty(broker: EmbeddedBroker) -> AsyncIterator[EmbeddedStack]:
    """A stack whose breaker reopens for probes after 2 s, with a tick every second."""
    env = {"CB_TIMEOUT_S": "2", "SWITCHYARD_TICK_INTERVAL_S": "1"}
    async with running_stack(broker, "f", warm=True, time_scale=0.05, seed=3, env=env) as running:
        yield running


class Log:
    """Everything the stack published, read from the start of its topics."""

    def __init__(self) -> None:
        self.records: dict[str, list[dict[str, Any]]] = defaultdict(list)

    async def read(self, stack: EmbeddedStack, until_responses: set[str], timeout_s: float) -> None:
        topics = stack.topics
        follower = await TopicFollower(
            stack.broker.bootstrap, [topics.responses, topics.decisions, topics.outcomes]
        ).start()
        deadline = time.monotonic() + timeout_s
        self.records.clear()
        try:
            while time.monotonic() < deadline:
                for record in await follower.poll():
                    self.records[record.topic].append(json.loads(record.value or b"{}"))
                answered = {r["request_id"] for r in self.records[topics.responses]}
                if until_responses <= answered:
                    break
            for record in await follower.poll(timeout_ms=1000):
                self.records[record.topic].append(json.loads(record.value or b"{}"))
        finally:
            await follower.stop()


async def send_paced(stack: EmbeddedStack, ids: list[str], per_second: float) -> None:
    for start in range(0, len(ids), 10):
        await publish(stack, [chat(i) for i in ids[start : start + 10]])
        await asyncio.sleep(10 / per_second)


async def check_invariants(stack: EmbeddedStack, log: Log, ids: list[str]) -> None:
    topics = stack.topics
    responses = [r for r in log.records[topics.responses] if r["request_id"] in set(ids)]
    per_request = Counter(r["request_id"] for r in responses)
    assert set(per_request) == set(ids), f"unanswered: {sorted(set(ids) - set(per_request))[:5]}"
    # Duplicates, if a crash ever makes any, carry the same id: count distinct ids.
    distinct = {(r["request_id"], r["id"]) for r in responses}
    assert len(distinct) == len(ids)
    # A 429 (neutral) frees its slot and counts apart: no pull.
    outcome_ids = {
        o["id"] for o in log.records[topics.outcomes] if o["status_class"] != "rate_limited"
    }
    port = stack.workers[0].env["SWITCHYARD_WEB_PORT"]
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        pulls = total_pulls(await bandit_stats(port))
        if pulls >= len(outcome_ids):
            break
        await asyncio.sleep(0.5)
    assert pulls == len(outcome_ids)


async def answered_log(stack: EmbeddedStack, ids: list[str], per_second: float) -> Log:
    """``ids`` sent at ``per_second``, then read back until each is answered (within 60 s),
    the invariants checked."""
    await send_paced(stack, ids, per_second)
    log = Log()
    await log.read(stack, set(ids), timeout_s=60)
    await check_invariants(stack, log, ids)
    return log


def victim_share(log: Log, stack: EmbeddedStack, ids: list[str]) -> float:
    chosen = [
        d["deployment"] for d in log.records[stack.topics.decisions] if d["request_id"] in ids
    ]
    return chosen.count(VICTIM_DEPLOYMENT) / max(1, len(chosen))


async def test_outage_then_recovery(faulty: EmbeddedStack) -> None:
    faulty.providers.set_outage(VICTIM)
    during = [f"out-{i}" for i in range(80)]
    log = await answered_log(faulty, during, per_second=40)
    assert all(
        r["status"] == "ok"
        for r in log.records[faulty.topics.responses]
        if r["request_id"] in during
    )
    failures_on_victim = [
        o for o in log.records[faulty.topics.outcomes] if o["deployment"] == VICTIM_DEPLOYMENT
    ]
    # Traffic left it: UCB1's mean reward drops it after a few failures, the breaker
    # (5 failures) stops the rest; either way it sees a handful of the 80 requests.
    assert 1 <= len(failures_on_victim) <= 10

    faulty.providers.clear_overrides(VICTIM)
    await asyncio.sleep(2.5)  # past CB_TIMEOUT_S: the breaker lets probes through
    after = [f"back-{i}" for i in range(80)]
    await send_paced(faulty, after, per_second=40)
    await log.read(faulty, set(during + after), timeout_s=60)
    await check_invariants(faulty, log, during + after)
    back = [
        o
        for o in log.records[faulty.topics.outcomes]
        if o["request_id"] in after and o["deployment"] == VICTIM_DEPLOYMENT
    ]
    assert any(o["status_class"] == "success" for o in back), "traffic never came back"
    stats = await bandit_stats(faulty.workers[0].env["SWITCHYARD_WEB_PORT"])
    assert stats["chat"][VICTIM_DEPLOYMENT]["breaker"] == "CLOSED"


async def test_rate_limit_with_retry_after_throttles_without_tripping(
    faulty: EmbeddedStack,
) -> None:
    faulty.providers.set_rate_limited(VICTIM, retry_after_s=5.0)
    log = await answered_log(faulty, [f"rl-{i}" for i in range(60)], per_second=30)
    limited = [
        o
        for o in log.records[faulty.topics.outcomes]
        if o["deployment"] == VICTIM_DEPLOYMENT and o["status_class"] == "rate_limited"
    ]
    assert limited and all(o["retry_after_s"] == 5.0 for o in limited)
    assert len(limited) <= 3  # Retry-After keeps traffic off it instead of hammering it
    reasons = {
        e["reason"]
        for d in log.records[faulty.topics.decisions]
        for e in d["excluded"]
        if e["deployment"] == VICTIM_DEPLOYMENT
    }
    assert "retry_after" in reasons
    stats = await bandit_stats(faulty.workers[0].env["SWITCHYARD_WEB_PORT"])
    assert stats["chat"][VICTIM_DEPLOYMENT]["breaker"] == "CLOSED"  # 429 is not ill health


@pytest.mark.parametrize("fault", ["hang", "malformed"])
async def test_timeouts_and_malformed_bodies_fall_back(faulty: EmbeddedStack, fault: str) -> None:
    if fault == "hang":
        faulty.providers.set_latency_factor(VICTIM, 200.0)  # far past its timeout
    else:
        faulty.providers.set_malformed(VICTIM)
    ids = [f"{fault}-{i}" for i in range(40)]
    log = await answered_log(faulty, ids, per_second=30)
    answered = [r for r in log.records[faulty.topics.responses] if r["request_id"] in ids]
    assert all(r["status"] == "ok" for r in answered)
    expected = "timeout" if fault == "hang" else "bad_response"
    bad = [o for o in log.records[faulty.topics.outcomes] if o["deployment"] == VICTIM_DEPLOYMENT]
    assert bad and {o["status_class"] for o in bad} == {expected}
    assert all(r["deployment"] != VICTIM_DEPLOYMENT for r in answered)


async def test_worker_killed_mid_traffic_loses_nothing(faulty: EmbeddedStack) -> None:
    ids = [f"kill-{i}" for i in range(300)]
    sending = asyncio.create_task(send_paced(faulty, ids, per_second=50))
    await asyncio.sleep(2.0)
    worker = faulty.workers[0]
    worker.kill()
    await asyncio.sleep(0.5)
    worker.start()
    await sending
    log = Log()
    await log.read(faulty, set(ids), timeout_s=90)
    await check_invariants(faulty, log, ids)


async def test_broker_frozen_for_twenty_seconds(faulty: EmbeddedStack) -> None:
    ids = [f"frozen-{i}" for i in range(120)]
    sending = asyncio.create_task(send_paced(faulty, ids[:60], per_second=40))
    await asyncio.sleep(1.0)
    faulty.broker.pause()
    try:
        await asyncio.sleep(20)
    finally:
        faulty.broker.resume()
    await sending
    await send_paced(faulty, ids[60:], per_second=40)
    log = Log()
    await log.read(faulty, set(ids), timeout_s=120)
    await check_invariants(faulty, log, ids)
