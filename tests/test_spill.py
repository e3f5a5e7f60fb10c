"""Spilled calls (agents/handoff.py): a worker with no room left sends the call to any
worker's ``spill`` agent; every spilled request is answered, and counted."""

from __future__ import annotations

import json
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


def spilled(stack: EmbeddedStack) -> float:
    port = stack.workers[0].env["SWITCHYARD_WEB_PORT"]
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    lines = [line for line in text.splitlines() if line.startswith("switchyard_spilled_dispatches")]
    return sum(float(line.split()[-1]) for line in lines if "_total" in line)


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
        assert spilled(stack) > 0
        # The calls made here: read back by id from a header, without parsing the request.
        dispatches = await read_raw(stack.broker.bootstrap, [stack.topics.dispatch], idle_s=1)
        assert dispatches
        for record in dispatches:
            value = json.loads(record.value or b"{}")
            assert dict(record.headers)[DISPATCH_ID_HEADER] == value["id"].encode()
    finally:
        await stack.stop()
