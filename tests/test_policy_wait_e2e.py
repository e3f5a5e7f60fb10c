"""``switchyard policy apply`` waits until every route runs the new version: requests for a
route the version adds, sent the moment it returns, through ``llm.requests`` and through
the gateway, are all answered and none is dead-lettered, on two workers (the one that
relays and one that does not); a rollback likewise takes the route away; a version that
cannot be in force (no worker left) is exit code 1 naming what is behind."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml
from stack_helpers import collect, publish, switchyard, warm_up

from app.client import TopicFollower
from app.embedded.broker import EmbeddedBroker
from app.embedded.stack import EmbeddedStack
from app.gateway.keys import hash_key
from app.gateway.run import RunningGateway, start_gateway

pytestmark = pytest.mark.broker
KEY = "sk-test-wait-" + "w" * 24
ROUTE = "chat2"


@pytest.fixture
async def running(broker: EmbeddedBroker) -> AsyncIterator[tuple[EmbeddedStack, RunningGateway]]:
    stack = EmbeddedStack(broker=broker, namespace=f"w{uuid.uuid4().hex[:8]}", time_scale=0.05)
    await stack.start(workers=2)
    document = yaml.safe_load(stack.providers_file.read_text())
    document["gateway_keys"] = [{"sha256": hash_key(KEY), "name": "wait"}]
    stack.providers_file.write_text(yaml.safe_dump(document))
    try:
        for worker in stack.workers:
            await worker.wait_ready()
        await warm_up(stack)
        gateway = await start_gateway(stack.gateway_settings())
        try:
            yield stack, gateway
        finally:
            await gateway.stop()
    finally:
        await stack.stop()


def ask(request_id: str, model: str) -> dict[str, Any]:
    return {
        "request_id": request_id,
        "model": model,
        "messages": [{"role": "user", "content": f"hello {request_id}"}],
        "max_tokens": 20,
    }


async def through_gateway(gateway: RunningGateway, model: str, count: int) -> list[str]:
    """``count`` requests at once through the OpenAI SDK: each answer's model, or the error."""
    client = openai.AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key=KEY, max_retries=0)

    async def one() -> str:
        try:
            answer = await client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "hello"}], max_tokens=20
            )
        except openai.APIStatusError as exc:
            return f"HTTP {exc.status_code} {exc.code}"
        return answer.model

    try:
        return list(await asyncio.gather(*(one() for _ in range(count))))
    finally:
        await client.close()


async def fates(
    stack: EmbeddedStack, refused: str, served: str, timeout_s: float = 60.0
) -> tuple[list[dict[str, Any]], list[str], list[dict[str, Any]]]:
    """The responses and dead letters of request ``refused``, and the responses of
    ``served``, once each has come."""
    topics = stack.topics
    follower = TopicFollower(stack.broker.bootstrap, [topics.responses, topics.deadletter])
    await follower.start()
    gone: list[dict[str, Any]] = []
    letters: list[dict[str, Any]] = []
    kept: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline and not ((gone or letters) and kept):
            for record in await follower.poll():
                value = json.loads(record.value or b"{}")
                if record.topic == topics.deadletter:
                    letters.append(value)
                elif value["request_id"] == refused:
                    gone.append(value)
                elif value["request_id"] == served:
                    kept.append(value)
    finally:
        await follower.stop()
    return gone, dead_letters_of(letters, refused), kept


def dead_letters_of(letters: list[dict[str, Any]], prefix: str) -> list[str]:
    """The reasons of the dead letters of requests whose id starts with ``prefix``."""
    found = []
    for letter in letters:
        original = base64.b64decode(letter["original_base64"])
        if f'"{prefix}'.encode() in original:
            found.append(letter["reason"])
    return found


async def test_requests_sent_when_apply_returns_are_answered_then_rolled_back(
    running: tuple[EmbeddedStack, RunningGateway], tmp_path: Path
) -> None:
    stack, gateway = running
    topics = stack.topics
    document = yaml.safe_load(stack.providers_file.read_text())
    document["routes"][ROUTE] = {"providers": [document["providers"][0]["id"]]}
    bigger = tmp_path / "bigger.yaml"
    bigger.write_text(yaml.safe_dump(document))

    code, out = await switchyard(stack, "policy", "apply", str(bigger))
    assert code == 0, out
    assert "v2 in force on" in out and ROUTE in out, out

    # The moment it returns: the new route through the log and through the gateway.
    ids = [f"new-{n}" for n in range(20)]
    _, models = await asyncio.gather(
        publish(stack, [ask(rid, ROUTE) for rid in ids]),
        through_gateway(gateway, ROUTE, 10),
    )
    assert all(not m.startswith("HTTP") for m in models), models
    seen = await collect(stack, {topics.responses: len(ids) + 11}, timeout_s=60)
    answers = {r["request_id"]: r for r in seen[topics.responses] if r["request_id"] in ids}
    assert set(answers) == set(ids)
    assert {a["status"] for a in answers.values()} == {"ok"}
    early = await collect(stack, {topics.deadletter: 0}, timeout_s=2)
    assert dead_letters_of(early[topics.deadletter], "new-") == []

    # A rollback to version 1 is version 3: once it returns, the route folded it and serves
    # no more (a worker's ingest that has not read it yet forwards the request, which the
    # route refuses); the other route goes on.
    code, out = await switchyard(stack, "policy", "apply", "--version", "1")
    assert code == 0, out
    assert "v3 in force" in out
    await publish(stack, [ask("gone-1", ROUTE), ask("kept-1", "chat")])
    refused = await through_gateway(gateway, ROUTE, 1)
    assert refused[0].startswith("HTTP 4"), refused
    gone, letters, kept = await fates(stack, "gone-1", "kept-1")
    assert letters == ["unknown_route"] or [r["status"] for r in gone] == ["error"], (gone, letters)
    assert [r["status"] for r in kept] == ["ok"]

    # The same policy again is no version: nothing to wait for.
    code, out = await switchyard(stack, "policy", "apply", "--version", "1")
    assert code == 0 and "no new version" in out, out

    # No worker left: the version cannot be in force; exit 1 naming what is behind.
    for worker in stack.workers:
        worker.kill()
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "app.cli", "policy", "apply", str(bigger), "--wait-timeout", "5"],
        env=stack.worker_env(0),
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 1, done
    said = done.stderr.decode()
    assert "v4 not in force" in said and f"{ROUTE}: " in said, said
    history = await switchyard(stack, "policy", "history", "--json")
    assert json.loads(history[1].splitlines()[-1])["version"] == 4
