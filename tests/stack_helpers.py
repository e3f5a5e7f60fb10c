"""Helpers for tests that drive a worker on the embedded broker."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Self

import httpx
import openai
from aiohttp import web

from app.client import RequestPublisher, TopicFollower
from app.embedded.stack import EmbeddedStack
from app.gateway.run import RunningGateway, start_gateway
from bench.fault_provider import FaultOptions, FaultProvider, start

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

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


async def _cli(
    stack: EmbeddedStack, args: tuple[str, ...], timeout_s: float
) -> subprocess.CompletedProcess[bytes]:
    """``switchyard ARGS`` run against the stack (a worker's environment), output captured."""
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "app.cli", *args],
        env=stack.worker_env(0),
        capture_output=True,
        timeout=timeout_s,
    )


async def switchyard(stack: EmbeddedStack, *args: str) -> tuple[int, str]:
    done = await _cli(stack, args, timeout_s=120)
    return done.returncode, done.stdout.decode()


async def replayed(stack: EmbeddedStack, timeout_s: float = 120) -> dict[str, Any]:
    """The report of ``switchyard replay --json`` over the stack's log, checked: it exited
    0 and no decision mismatched."""
    done = await _cli(stack, ("replay", "--json"), timeout_s)
    code, out = done.returncode, done.stdout.decode()
    assert out, done.stderr.decode()[-2000:]
    report: dict[str, Any] = json.loads(out)
    assert code == 0 and report["mismatched"] == 0, report.get("first_mismatches")
    return report


def new_stack(broker: Any, prefix: str, **options: Any) -> EmbeddedStack:
    """An embedded stack on topics of its own (namespace ``prefix`` + 8 hex digits)."""
    return EmbeddedStack(broker=broker, namespace=f"{prefix}{uuid.uuid4().hex[:8]}", **options)


@contextlib.asynccontextmanager
async def running_stack(
    broker: Any, prefix: str, *, workers: int = 1, warm: bool = False, **options: Any
) -> AsyncIterator[EmbeddedStack]:
    """:func:`new_stack` started with ``workers`` workers (``warm``: until it answers a
    request) and stopped at the end."""
    stack = new_stack(broker, prefix, **options)
    try:
        await stack.start(workers=workers)
        if warm:
            await warm_up(stack)
        yield stack
    finally:
        await stack.stop()


@contextlib.asynccontextmanager
async def gateway_in_front(
    stack: EmbeddedStack, update: dict[str, Any] | None = None
) -> AsyncIterator[RunningGateway]:
    """A gateway in front of ``stack`` (its settings with ``update``), stopped at the end."""
    gateway = await start_gateway(stack.gateway_settings().model_copy(update=update or {}))
    try:
        yield gateway
    finally:
        await gateway.stop()


@contextlib.asynccontextmanager
async def stack_and_gateway(
    broker: Any,
    prefix: str,
    *,
    gateway: dict[str, Any] | None = None,
    **options: Any,
) -> AsyncIterator[tuple[EmbeddedStack, RunningGateway]]:
    """A one-worker :func:`running_stack` and a gateway in front (its settings with
    ``gateway``); both stopped at the end."""
    async with (
        running_stack(broker, prefix, **options) as stack,
        gateway_in_front(stack, gateway) as running,
    ):
        yield stack, running


class LocalServer:
    """An aiohttp app on 127.0.0.1 (a free port) answering POST ``routes`` (path, handler);
    ``url`` is its base URL once started."""

    def __init__(self, routes: Sequence[tuple[str, Handler]]) -> None:
        self.routes = list(routes)
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> Self:
        app = web.Application()
        for path, handler in self.routes:
            app.router.add_post(path, handler)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self.runner.addresses[0][1]}"
        return self

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


@contextlib.asynccontextmanager
async def fault_provider(options: FaultOptions) -> AsyncIterator[str]:
    """bench/fault_provider.py's provider on 127.0.0.1, stopped at the end: its base URL."""
    runner, port = await start(FaultProvider(options))
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def fault_scenario(base_url: str, scenario: str, **extra: Any) -> dict[str, Any]:
    """A providers-file entry for one scenario of the :func:`fault_provider` at ``base_url``
    (id: the scenario's name with dashes); a stalled stream is noticed in a second."""
    return {
        "id": scenario.replace("_", "-"),
        "base_url": f"{base_url}/{scenario}/v1",
        "timeout_ms": 20_000,
        "stream_idle_timeout_ms": 1_000,
        "models": [{"name": scenario}],
        **extra,
    }


@contextlib.asynccontextmanager
async def provider_and_gateway(
    broker: Any,
    routes: list[tuple[str, Any]],
    providers_yaml: Callable[[str], str],
    env: dict[str, str] | None = None,
    gateway: dict[str, Any] | None = None,
) -> AsyncIterator[tuple[EmbeddedStack, RunningGateway]]:
    """A provider serving ``routes`` (POST path, handler) on 127.0.0.1, a one-worker stack
    routing to it by ``providers_yaml(its base URL)``, and a gateway in front (its settings
    with ``gateway``); all stopped at the end."""
    provider = await LocalServer(routes).start()
    try:
        async with stack_and_gateway(
            broker,
            "p",
            providers_yaml=lambda _: providers_yaml(provider.url),
            env=env,
            gateway=gateway,
        ) as running:
            yield running
    finally:
        await provider.stop()


async def wait_ready(url: str, tries: int) -> None:
    """Until ``url``'s ``/readyz`` answers 200, ``tries`` times 0.1 s apart at the most."""
    async with httpx.AsyncClient() as http:
        for _ in range(tries):
            try:
                if (await http.get(f"{url}/readyz")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.1)
    raise AssertionError("gateway not ready")


async def warm_up_gateway(
    url: str,
    key: str,
    asks: Sequence[tuple[str, Any]],
    *,
    tries: int,
    errors: type[Exception] = openai.APIError,
    pause_s: float = 0.0,
    timeout: float | None = None,
) -> None:
    """Until the worker has joined, requests wait in the log: ask the gateway at ``url``
    every (model, messages) of ``asks`` until all are answered, at most ``tries`` times,
    ``pause_s`` apart after each of ``errors``."""
    client = openai.AsyncOpenAI(
        base_url=f"{url}/v1",
        api_key=key,
        max_retries=0,
        timeout=openai.DEFAULT_TIMEOUT if timeout is None else timeout,
    )
    for _ in range(tries):
        try:
            for model, messages in asks:
                await client.chat.completions.create(model=model, messages=messages)
            break
        except errors:
            if pause_s:
                await asyncio.sleep(pause_s)
    await client.close()
