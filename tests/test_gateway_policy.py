"""The gateway follows the policy log: a route added by ``switchyard policy apply`` is
served to SDK clients and listed by ``/v1/models`` without a restart, and a rollback
takes it away again."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import openai
import pytest
import yaml
from stack_helpers import gateway_in_front, running_stack, switchyard, warm_up

from app.embedded.broker import EmbeddedBroker
from app.embedded.stack import EmbeddedStack
from app.gateway.keys import hash_key
from app.gateway.run import RunningGateway, start_gateway

pytestmark = pytest.mark.broker
KEY = "sk-test-policy-" + "p" * 20


@pytest.fixture
async def running(broker: EmbeddedBroker) -> AsyncIterator[tuple[EmbeddedStack, RunningGateway]]:
    async with running_stack(broker, "g", time_scale=0.05) as stack:
        document = yaml.safe_load(stack.providers_file.read_text())
        document["gateway_keys"] = [{"sha256": hash_key(KEY), "name": "policy"}]
        stack.providers_file.write_text(yaml.safe_dump(document))
        await warm_up(stack)
        async with gateway_in_front(stack) as gateway:
            yield stack, gateway


async def _answers(gateway: RunningGateway, model: str, timeout_s: float = 30.0) -> bool:
    """Whether ``model`` is answered (True) or refused as unknown (False) once settled."""
    client = openai.AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key=KEY, max_retries=0)
    try:
        await client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "hello"}]
        )
        return True
    except openai.NotFoundError:
        return False
    finally:
        await client.close()


async def _until(gateway: RunningGateway, model: str, expected: bool) -> float:
    started = time.monotonic()
    while time.monotonic() - started < 30.0:
        if await _answers(gateway, model) is expected:
            return time.monotonic() - started
        await asyncio.sleep(0.5)
    raise AssertionError(f"{model!r} answered={not expected} after 30 s")


async def _listed(gateway: RunningGateway) -> set[str]:
    client = openai.AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key=KEY, max_retries=0)
    try:
        return {m.id async for m in client.models.list()}
    finally:
        await client.close()


async def test_a_route_applied_live_is_served_then_rolled_back(
    running: tuple[EmbeddedStack, RunningGateway], tmp_path: Path
) -> None:
    stack, gateway = running
    assert not await _answers(gateway, "chat2")
    document = yaml.safe_load(stack.providers_file.read_text())
    document["routes"]["chat2"] = {"providers": [document["providers"][0]["id"]]}
    bigger = tmp_path / "bigger.yaml"
    bigger.write_text(yaml.safe_dump(document))
    code, out = await switchyard(stack, "policy", "apply", str(bigger))
    assert code == 0, out
    took = await _until(gateway, "chat2", True)
    assert took < 20.0
    assert "chat2" in await _listed(gateway)
    code, out = await switchyard(stack, "policy", "apply", "--version", "1")
    assert code == 0, out
    await _until(gateway, "chat2", False)  # refused by the gateway, or by ingest before it
    started = time.monotonic()
    while "chat2" in await _listed(gateway):  # the gateway reads the rollback too
        assert time.monotonic() - started < 30.0, "chat2 still listed 30 s after the rollback"
        await asyncio.sleep(0.5)


async def test_a_gateway_ahead_of_the_workers_policy_gets_the_refusal_at_once(
    running: tuple[EmbeddedStack, RunningGateway], tmp_path: Path
) -> None:
    """A route the gateway knows and the workers do not (a rollback the gateway has not read
    yet): ingest dead-letters the request and answers the gateway's reply address, so the
    client gets a 404 in about a second, not a 504 at the request deadline."""
    stack, _ = running
    document = yaml.safe_load(stack.providers_file.read_text())
    document["routes"]["ghost"] = {"providers": [document["providers"][0]["id"]]}
    ahead = tmp_path / "ahead.yaml"
    ahead.write_text(yaml.safe_dump(document))
    settings = stack.gateway_settings()
    # A policy topic of its own, empty: the gateway serves its providers file's routes.
    topics = settings.topics.model_copy(update={"policy": f"ahead-{uuid.uuid4().hex[:8]}"})
    gateway = await start_gateway(
        settings.model_copy(update={"providers": ahead, "topics": topics})
    )
    client = openai.AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key=KEY, max_retries=0)
    try:
        started = time.monotonic()
        with pytest.raises(openai.NotFoundError) as refused:
            await client.chat.completions.create(
                model="ghost", messages=[{"role": "user", "content": "hello"}], timeout=60
            )
        assert time.monotonic() - started < 15.0
        assert refused.value.code == "model_not_found"
        assert "unknown_route" in refused.value.message
    finally:
        await client.close()
        await gateway.stop()
