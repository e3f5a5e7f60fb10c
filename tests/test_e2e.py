"""End to end through the embedded broker: a worker process, simulated providers, real topics."""

from __future__ import annotations

import asyncio
import json
import shutil
import time
import uuid
from typing import Any

import httpx
import pytest

from app.client import RequestPublisher, TopicFollower
from app.embedded.stack import EmbeddedStack

pytestmark = pytest.mark.broker

MALFORMED: list[tuple[bytes, str]] = [
    (b"{not json", "not_json"),
    (b"[1, 2, 3]", "not_object"),
    (json.dumps({"request_id": "x"}).encode(), "schema_violation"),
    (
        json.dumps(
            {"request_id": "y", "model": "nope", "messages": [{"role": "user", "content": "hi"}]}
        ).encode(),
        "unknown_route",
    ),
    (b"\xff\xfe\x00garbage", "not_json"),
]
SECRET_PROMPT = "the-prompt-text-must-never-leave-the-request"


def chat(request_id: str) -> dict[str, Any]:
    return {
        "request_id": request_id,
        "model": "chat",
        "messages": [{"role": "user", "content": f"{SECRET_PROMPT} {request_id}"}],
        "max_tokens": 50,
        "unknown_field": "ignored, not fatal",
    }


async def collect(
    stack: EmbeddedStack, until: dict[str, int], timeout_s: float = 90.0
) -> dict[str, list[dict[str, Any]]]:
    """Read topics from the start until each has at least ``until[topic]`` records."""
    follower = await TopicFollower(stack.broker.bootstrap, list(until)).start()
    seen: dict[str, list[dict[str, Any]]] = {topic: [] for topic in until}
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            for record in await follower.poll():
                seen[record.topic].append(json.loads(record.value or b"{}"))
            if all(len(seen[t]) >= n for t, n in until.items()):
                break
        # Anything extra (duplicates) arriving just after.
        for record in await follower.poll(timeout_ms=500):
            seen[record.topic].append(json.loads(record.value or b"{}"))
    finally:
        await follower.stop()
    return seen


async def publish(stack: EmbeddedStack, requests: list[dict[str, Any] | bytes]) -> None:
    publisher = await RequestPublisher(stack.broker.bootstrap, stack.topics.requests).start()
    try:
        for request in requests:
            await publisher.publish(request)
        await publisher.flush()
    finally:
        await publisher.stop()


async def test_requests_flow_to_responses_and_bad_input_to_deadletter(
    stack: EmbeddedStack,
) -> None:
    ids = [f"e2e-{i}" for i in range(40)]
    batch: list[dict[str, Any] | bytes] = [chat(i) for i in ids[:20]]
    batch += [raw for raw, _ in MALFORMED]
    batch += [chat(i) for i in ids[20:]]
    await publish(stack, batch)

    topics = stack.topics
    seen = await collect(
        stack,
        {
            topics.responses: len(ids),
            topics.deadletter: len(MALFORMED),
            topics.decisions: 1,
            topics.outcomes: len(ids),
        },
    )
    responses = seen[topics.responses]
    assert sorted(r["request_id"] for r in responses) == sorted(ids)
    assert all(r["status"] == "ok" for r in responses), [r["error"] for r in responses]
    assert all(r["completion"]["choices"][0]["message"]["content"] for r in responses)

    letters = seen[topics.deadletter]
    assert sorted(d["reason"] for d in letters) == sorted(reason for _, reason in MALFORMED)
    assert all(d["detail"] and d["original_base64"] for d in letters)

    decisions, outcomes = seen[topics.decisions], seen[topics.outcomes]
    assert {d["request_id"] for d in decisions} == set(ids)
    first = decisions[0]
    assert first["candidates"] and first["strategy"] == "ucb1" and first["config_hash"]
    assert {o["request_id"] for o in outcomes} == set(ids)
    assert all(o["tokens_in"] > 0 and o["cost_usd"] > 0 for o in outcomes if o["reward"] == 1.0)
    for record in decisions + outcomes:
        assert SECRET_PROMPT not in json.dumps(record)

    metrics = httpx.get(f"http://127.0.0.1:{stack.workers[0].env['SWITCHYARD_WEB_PORT']}/metrics")
    assert "ai_bandit_choice_total" in metrics.text
    assert "ai_circuit_breaker_state" in metrics.text


async def _bandit_stats(port: str) -> dict[str, Any]:
    async with httpx.AsyncClient() as client:
        reply = await client.get(f"http://127.0.0.1:{port}/admin/bandit/stats", timeout=5)
        return dict(reply.json())


def _total_pulls(stats: dict[str, Any]) -> int:
    return sum(arm["pulls"] for route in stats.values() for arm in route.values())


async def _wait_for_pulls(port: str, pulls: int, timeout_s: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    stats: dict[str, Any] = {}
    while time.monotonic() < deadline:
        try:
            stats = await _bandit_stats(port)
            if _total_pulls(stats) >= pulls:
                return stats
        except httpx.HTTPError:
            pass
        await asyncio.sleep(0.3)
    return stats


async def test_table_recovers_from_changelog_after_local_state_is_deleted(
    stack: EmbeddedStack,
) -> None:
    ids = [f"rec-{uuid.uuid4().hex[:6]}-{i}" for i in range(30)]
    await publish(stack, [chat(i) for i in ids])
    await collect(stack, {stack.topics.outcomes: len(ids)})
    worker = stack.workers[0]
    port = worker.env["SWITCHYARD_WEB_PORT"]
    before = await _wait_for_pulls(port, len(ids))
    assert _total_pulls(before) == len(ids)

    worker.stop()
    shutil.rmtree(worker.env["SWITCHYARD_DATA_DIR"])
    worker.start()
    after = await _wait_for_pulls(port, len(ids))
    # Identical, to the last update: the Tansu end-offset workaround at work.
    assert after == before


async def test_redelivered_outcomes_do_not_change_the_state(stack: EmbeddedStack) -> None:
    ids = [f"dup-{i}" for i in range(10)]
    await publish(stack, [chat(i) for i in ids])
    await collect(stack, {stack.topics.outcomes: len(ids)})
    port = stack.workers[0].env["SWITCHYARD_WEB_PORT"]
    before = await _wait_for_pulls(port, len(ids))

    # At-least-once delivery: every feedback record arrives a second time.
    follower = await TopicFollower(stack.broker.bootstrap, [stack.topics.routing]).start()
    feedback = []
    deadline = time.monotonic() + 30
    while len(feedback) < len(ids) and time.monotonic() < deadline:
        feedback += [
            r for r in await follower.poll() if b'"type":"attempt.finished"' in (r.value or b"")
        ]
    await follower.stop()
    assert len(feedback) == len(ids)
    producer = await RequestPublisher(stack.broker.bootstrap, stack.topics.routing).start()
    for record in feedback:
        await producer.publish(record.value or b"", key=record.key)
    await producer.flush()
    await producer.stop()

    # A marker request, routed after the duplicates, shows they have been folded.
    await publish(stack, [chat("dup-marker")])
    after = await _wait_for_pulls(port, len(ids) + 1)
    assert _total_pulls(after) == len(ids) + 1
    for route, arms in before.items():
        for deployment, arm in arms.items():
            if after[route][deployment]["pulls"] == arm["pulls"]:
                assert after[route][deployment] == arm
