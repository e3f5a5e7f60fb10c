"""Spilled calls (agents/handoff.py): a worker with no room left sends the call to any
worker's ``spill`` agent; every spilled request is answered, and counted."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import httpx
import pytest
from stack_helpers import chat, publish, warm_up

from agents.handoff import DISPATCH_ID_HEADER
from app.client import all_answered, read_raw, read_topics
from app.embedded.broker import EmbeddedBroker
from app.embedded.stack import EmbeddedStack

pytestmark = pytest.mark.broker
REQUESTS = 40


def metric(stack: EmbeddedStack, prefix: str) -> float:
    """The sum of the worker's samples whose line starts with ``prefix``."""
    port = stack.workers[0].env["SWITCHYARD_WEB_PORT"]
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    lines = [line for line in text.splitlines() if line.startswith(prefix)]
    assert lines, f"no {prefix} on /metrics"
    return sum(float(line.split()[-1]) for line in lines)


async def acks_settle(stack: EmbeddedStack, timeout_s: float = 20.0) -> dict[str, float]:
    """The acks each agent holds, once the hand-off and spill agents hold none."""
    deadline = time.monotonic() + timeout_s
    while True:
        held = {
            agent: metric(stack, f'switchyard_acks_held{{agent="{agent}"}}')
            for agent in ("router", "handoff", "spill")
        }
        if held["handoff"] == held["spill"] == 0 or time.monotonic() > deadline:
            return held
        await asyncio.sleep(0.5)


async def test_calls_beyond_the_workers_room_are_spilled_and_all_answered(
    broker: EmbeddedBroker,
) -> None:
    env = {"SWITCHYARD_EXECUTOR_CONCURRENCY": "1", "SWITCHYARD_SPILL_CONCURRENCY": "4"}
    stack = EmbeddedStack(broker=broker, namespace=f"sp{uuid.uuid4().hex[:6]}", env=env)
    await stack.start(workers=1)
    try:
        await warm_up(stack)
        ids = [f"spill-{i:03d}" for i in range(REQUESTS)]
        await publish(stack, [chat(i) for i in ids])
        topic = stack.topics.responses
        seen = await read_topics(stack.broker.bootstrap, [topic], all_answered(ids, topic), 90)
        answers = {r["request_id"]: r for r in seen[topic] if r["request_id"] in ids}
        assert set(answers) == set(ids)
        assert all(answer["status"] == "ok" for answer in answers.values())
        assert metric(stack, "switchyard_spilled_dispatches_total") > 0
        # Every call ended, so every dispatch record is acked; the router holds at most
        # the newest event of each partition (its row waits for the next event).
        held = await acks_settle(stack)
        assert held["handoff"] == held["spill"] == 0, held
        assert held["router"] <= stack.partitions, held
        # The calls made here: read back by id from a header, without parsing the request.
        dispatches = await read_raw(stack.broker.bootstrap, [stack.topics.dispatch], idle_s=1)
        assert dispatches
        for record in dispatches:
            value = json.loads(record.value or b"{}")
            assert dict(record.headers)[DISPATCH_ID_HEADER] == value["id"].encode()
    finally:
        await stack.stop()
