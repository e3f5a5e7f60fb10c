"""Helpers for tests that drive a worker on the embedded broker."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
from aiohttp import web

from app.client import RequestPublisher, TopicFollower
from app.embedded.stack import EmbeddedStack
from app.gateway.run import RunningGateway, start_gateway

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


async def bandit_stats(port: str) -> dict[str, Any]:
    async with httpx.AsyncClient() as client:
        reply = await client.get(f"http://127.0.0.1:{port}/admin/bandit/stats", timeout=5)
        return dict(reply.json())


def total_pulls(stats: dict[str, Any]) -> int:
    return sum(arm["pulls"] for route in stats.values() for arm in route.values())


async def wait_for_pulls(port: str, pulls: int, timeout_s: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    stats: dict[str, Any] = {}
    while time.monotonic() < deadline:
        try:
            stats = await bandit_stats(port)
            if total_pulls(stats) >= pulls:
                return stats
        except httpx.HTTPError:
            pass
        await asyncio.sleep(0.3)
    return stats


async def warm_up(stack: EmbeddedStack, timeout_s: float = 60.0) -> None:
    """Wait until the worker answers a request, so a test measures a running router."""
    request_id = f"warm-up-{time.monotonic_ns()}"
    await publish(stack, [chat(request_id)])
    seen = await collect(stack, {stack.topics.responses: 1}, timeout_s=timeout_s)
    assert any(r["request_id"] == request_id for r in seen[stack.topics.responses])


async def send(stack: EmbeddedStack, topic: str, records: list[tuple[bytes | None, Any]]) -> None:
    publisher = await RequestPublisher(stack.broker.bootstrap, topic).start()
    try:
        for key, value in records:
            await publisher.publish(value, key=key)
        await publisher.flush()
    finally:
        await publisher.stop()


async def watch(
    stack: EmbeddedStack, grades: int, letters: int, timeout_s: float = 60.0
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[bytes]]:
    """GradeApplied records on the routing log and feedback dead letters, until counted."""
    topics = [stack.topics.routing, stack.topics.deadletter]
    follower = await TopicFollower(stack.broker.bootstrap, topics).start()
    found: list[dict[str, Any]] = []
    dead: list[dict[str, Any]] = []
    raw: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline and (len(found) < grades or len(dead) < letters):
            for record in await follower.poll():
                value = record.value or b""
                event = json.loads(value)
                if event.get("type") == "grade.applied":
                    found.append(event)
                    raw.append(value)
                elif record.topic == stack.topics.deadletter:
                    dead.append(event)
                    raw.append(value)
        for record in await follower.poll(timeout_ms=1500):  # duplicates arriving late
            event = json.loads(record.value or b"")
            if event.get("type") == "grade.applied":
                found.append(event)
    finally:
        await follower.stop()
    return found, dead, raw


async def switchyard(stack: EmbeddedStack, *args: str) -> tuple[int, str]:
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "app.cli", *args],
        env=stack.worker_env(0),
        capture_output=True,
        timeout=120,
    )
    return done.returncode, done.stdout.decode()


@contextlib.asynccontextmanager
async def provider_and_gateway(
    broker: Any,
    routes: list[tuple[str, Any]],
    providers_yaml: Callable[[str], str],
    env: dict[str, str] | None = None,
) -> AsyncIterator[tuple[EmbeddedStack, RunningGateway]]:
    """A provider serving ``routes`` (POST path, handler) on 127.0.0.1, a one-worker stack
    routing to it by ``providers_yaml(its base URL)``, and a gateway in front; all stopped
    at the end."""
    app = web.Application()
    for path, handler in routes:
        app.router.add_post(path, handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    base_url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    stack = EmbeddedStack(
        broker=broker,
        namespace=f"p{uuid.uuid4().hex[:8]}",
        providers_yaml=lambda _: providers_yaml(base_url),
        env=env,
    )
    try:
        await stack.start(workers=1)
        gateway = await start_gateway(stack.gateway_settings())
        try:
            yield stack, gateway
        finally:
            await gateway.stop()
    finally:
        await stack.stop()
        await runner.cleanup()
