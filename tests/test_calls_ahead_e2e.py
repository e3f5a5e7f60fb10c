"""Calls ahead through a worker (app/router/ahead.py): requests that come one at a time
have their calls started before their routing-log record is acknowledged, and each is
still decided, called, answered and learnt once."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from stack_helpers import chat, collect, total_pulls, wait_for_pulls, warm_up

from app.client import RequestPublisher, TopicFollower
from app.embedded.stack import EmbeddedStack
from bench.hops import calls_ahead

pytestmark = pytest.mark.broker


async def test_requests_one_at_a_time_are_called_ahead_and_counted_once(
    stack: EmbeddedStack,
) -> None:
    await warm_up(stack)
    port = stack.workers[0].env["SWITCHYARD_WEB_PORT"]
    ids = [f"ahead-{uuid.uuid4().hex[:6]}-{n}" for n in range(12)]
    publisher = await RequestPublisher(stack.broker.bootstrap, stack.topics.requests).start()
    follower = await TopicFollower(stack.broker.bootstrap, [stack.topics.responses]).start()
    try:
        for request_id in ids:  # the next once the last is answered: the partition idle
            await publisher.publish(chat(request_id))
            await publisher.flush()
            deadline = time.monotonic() + 60
            answered = False
            while not answered and time.monotonic() < deadline:
                for record in await follower.poll():
                    answered |= json.loads(record.value or b"{}")["request_id"] == request_id
            assert answered, request_id
    finally:
        await follower.stop()
        await publisher.stop()

    topics = stack.topics
    seen = await collect(stack, {topics.responses: len(ids) + 1, topics.outcomes: len(ids) + 1})
    for topic in (topics.responses, topics.outcomes):
        mine = [r["request_id"] for r in seen[topic] if r["request_id"] in ids]
        assert sorted(mine) == sorted(ids), topic  # each once: no call's records twice
    stats = await wait_for_pulls(port, len(ids) + 1)
    assert total_pulls(stats) == len(ids) + 1  # every call learnt once

    verdicts = await calls_ahead(stack.workers[0].web_url)
    # The route's first request teaches the worker its partition; later ones come to an
    # idle partition (a tick of the route's clock may take one back).
    assert verdicts["claimed"] >= len(ids) - 2, verdicts
    assert verdicts["taken_back"] <= 1
