"""Workers join and leave under traffic: nothing waits forever.

The router acks an event only once a written row includes it and writes the rows
of a partition's last events when the next event comes; a rebalance holds the
next event back. Faust's default (wait for every unacked event before giving
partitions up) then froze every rebalance and every stop (bench scaleout).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import pytest
from stack_helpers import chat, publish, warm_up
from test_audit_e2e import switchyard

from app.client import all_answered, read_topics
from app.embedded.broker import EmbeddedBroker
from app.embedded.stack import EmbeddedStack

pytestmark = pytest.mark.broker
REQUESTS = 120


async def test_a_worker_joining_and_one_leaving_under_traffic_loses_nothing(
    broker: EmbeddedBroker,
) -> None:
    stack = EmbeddedStack(broker=broker, namespace=f"rb{uuid.uuid4().hex[:6]}", time_scale=0.02)
    await stack.start(workers=1)
    try:
        await warm_up(stack)
        ids = [f"rebalance-{i:03d}" for i in range(REQUESTS)]
        first, second = ids[: REQUESTS // 2], ids[REQUESTS // 2 :]
        await publish(stack, [chat(i) for i in first])
        stack.add_worker()  # a rebalance with the first half in flight
        await asyncio.sleep(8)
        started = time.monotonic()
        await asyncio.to_thread(stack.workers[0].stop)  # SIGTERM: the second worker takes over
        stop_s = time.monotonic() - started
        await publish(stack, [chat(i) for i in second])
        topic = stack.topics.responses
        done = all_answered(ids, topic)
        seen = await read_topics(stack.broker.bootstrap, [topic], done, timeout_s=120)
        answered = {r["request_id"] for r in seen[topic]}
        assert not set(ids) - answered, sorted(set(ids) - answered)[:5]
        assert stop_s < 10.0, f"SIGTERM took {stop_s:.1f}s"
        # Both workers folded records they wrote before the broker delivered them
        # (app/worker/local_log.py), across the rebalance: the log still replays exactly.
        code, out = await switchyard(stack, "replay", "--json")
        report = json.loads(out)
        assert code == 0 and report["mismatched"] == 0, report
        assert report["reproduced"] == report["decisions"] >= REQUESTS
    finally:
        await stack.stop()
