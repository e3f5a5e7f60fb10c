"""A worker not told about Tansu finds out at start (no silent slow mode), and leaves the
workaround off on Apache Kafka.

Tansu answers a fetch only when its wait runs out; with Faust's default wait each
of a request's hops would cost about a second. The worker probes the broker when
``SWITCHYARD_TANSU_COMPAT`` is unset and turns the short wait on itself.
"""

from __future__ import annotations

import time
import uuid

import pytest
from stack_helpers import chat, collect, publish, warm_up

from app.compat.detect import broker_holds_fetches
from app.embedded.broker import EmbeddedBroker
from app.embedded.kafka import KafkaBroker
from app.embedded.stack import EmbeddedStack

pytestmark = pytest.mark.broker


async def test_tansu_is_found_to_hold_fetches(tansu: EmbeddedBroker) -> None:
    assert await broker_holds_fetches(tansu.bootstrap, f"probe-{uuid.uuid4().hex[:8]}")


async def test_kafka_is_found_not_to_hold_fetches(kafka_broker: KafkaBroker) -> None:
    assert not await broker_holds_fetches(kafka_broker.bootstrap, f"probe-{uuid.uuid4().hex[:8]}")


@pytest.mark.parametrize("which", ["tansu", "kafka_broker"])
async def test_a_worker_left_to_find_out_answers_in_well_under_a_second(
    which: str, request: pytest.FixtureRequest
) -> None:
    """On Tansu the worker turns the workaround on; on Apache Kafka it leaves it off."""
    broker: EmbeddedBroker | KafkaBroker = request.getfixturevalue(which)
    stack = EmbeddedStack(
        broker=broker, namespace=f"d{uuid.uuid4().hex[:8]}", time_scale=0.01, detect_broker=True
    )
    await stack.start(workers=1)
    try:
        assert "SWITCHYARD_TANSU_COMPAT" not in stack.workers[0].env
        await warm_up(stack)
        took = []
        for i in range(3):
            started = time.monotonic()
            await publish(stack, [chat(f"detect-{i}")])
            seen = await collect(stack, {stack.topics.responses: i + 2}, timeout_s=30)
            assert any(r["request_id"] == f"detect-{i}" for r in seen[stack.topics.responses])
            took.append(time.monotonic() - started)
        # Five hops at Faust's 1,500 ms wait on Tansu: several seconds; with the short
        # wait (or on Kafka, which answers a fetch as a record lands), ~0.1 s.
        assert sorted(took)[1] < 1.0, took
        log = (stack.workdir / "worker-0.log").read_text(encoding="utf-8", errors="replace")
        assert ("SWITCHYARD_TANSU_COMPAT turned on" in log) == broker.is_tansu
    finally:
        await stack.stop()
