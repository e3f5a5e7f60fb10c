"""``POST /v1/embeddings`` driven with the official ``openai`` SDK against the embedded
stack: single and batch input, the same text the same vector, ``dimensions`` and both
formats, a failing embeddings deployment falling back to another, the capability filter's
traced exclusions both ways, no input text in decisions or outcomes, errors, and a replay
of it all with 0 mismatches.

One stack for the module: two simulated chat providers on route ``chat``, two simulated
deployments of one embeddings model on route ``embeddings``, all four on route ``mixed``.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
import yaml
from stack_helpers import replayed

from app.client import read_topics
from app.embedded.broker import EmbeddedBroker
from app.embedded.simulated import EMBEDDING_MODELS, SEED_003_MODELS, SimulatedProviders
from app.embedded.simulated.embeddings import vector_of
from app.embedded.simulated.providers_file import providers_config
from app.embedded.stack import EmbeddedStack
from app.gateway.keys import hash_key
from app.gateway.run import RunningGateway, start_gateway

pytestmark = pytest.mark.broker

KEY = "sk-test-embed-" + "a" * 20
MODEL = EMBEDDING_MODELS[0].model
FIRST, SECOND = (f"{m.provider_id}:{m.model}" for m in EMBEDDING_MODELS)
CHATS = SEED_003_MODELS[:2]
CHAT_DEPLOYMENTS = {f"{m.provider_id}:{m.model}" for m in CHATS}


def _providers_yaml(sim: SimulatedProviders) -> str:
    config = providers_config(sim.base_urls(), sim.models, time_scale=sim.time_scale)
    # The scaled timeouts (250 ms for the embeddings deployments) can fire before an
    # outage's immediate 503 reaches a worker on a loaded machine; this module's fallback
    # is about that 503, so every call may take 10 s (the answers take milliseconds).
    for entry in config["providers"]:
        entry["timeout_ms"] = 10_000
    config["routes"]["mixed"] = {"providers": sim.provider_ids}
    config["gateway_keys"] = [{"sha256": hash_key(KEY), "tenant": "acme", "name": "app"}]
    return str(yaml.safe_dump(config))


class Env:
    def __init__(self, stack: EmbeddedStack, gateway: RunningGateway) -> None:
        self.stack, self.gateway = stack, gateway

    def client(self) -> openai.AsyncOpenAI:
        url = f"{self.gateway.url}/v1"
        return openai.AsyncOpenAI(base_url=url, api_key=KEY, max_retries=0, timeout=30)

    async def records(self, request_ids: set[str], *topics: str) -> dict[str, list[Any]]:
        """The records of ``topics`` about these requests, once each topic has some."""

        def mine(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
            return [r for r in records if r.get("request_id") in request_ids]

        def done(seen: dict[str, list[dict[str, Any]]]) -> bool:
            return all({r["request_id"] for r in mine(seen[t])} == request_ids for t in topics)

        found = await read_topics(self.stack.broker.bootstrap, topics, done, timeout_s=60)
        return {topic: mine(found[topic]) for topic in topics}


@pytest.fixture(scope="module")
async def env(broker: EmbeddedBroker) -> AsyncIterator[Env]:
    stack = EmbeddedStack(
        broker=broker,
        namespace=f"e{uuid.uuid4().hex[:8]}",
        time_scale=0.05,
        seed=1,
        simulated_models=(*CHATS, *EMBEDDING_MODELS),
        providers_yaml=_providers_yaml,
        env={"SWITCHYARD_REQUEST_DEADLINE_S": "20"},
    )
    try:
        await stack.start(workers=1)
        gateway = await start_gateway(stack.gateway_settings())
        try:
            await _warm_up(gateway)
            yield Env(stack, gateway)
        finally:
            await gateway.stop()
    finally:
        await stack.stop()


async def _warm_up(gateway: RunningGateway) -> None:
    client = openai.AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key=KEY, max_retries=0)
    for _ in range(30):
        try:
            await client.embeddings.create(model="embeddings", input="warm")
            break
        except openai.APIStatusError:
            await asyncio.sleep(0.5)
    await client.close()


async def test_one_text_and_a_batch_are_embedded_the_same_way(env: Env) -> None:
    client = env.client()
    raw = await client.embeddings.with_raw_response.create(model="embeddings", input="hello")
    one = raw.parse()
    assert raw.headers["x-switchyard-deployment"] in {FIRST, SECOND}
    assert one.object == "list" and one.model == MODEL
    assert [d.index for d in one.data] == [0] and len(one.data[0].embedding) == 1536
    assert one.usage.prompt_tokens == one.usage.total_tokens == 1
    texts = ["the first text", "hello", "a third one, longer than the others"]
    batch = await client.embeddings.create(model="embeddings", input=texts)
    assert [d.index for d in batch.data] == [0, 1, 2]
    assert batch.data[1].embedding == one.data[0].embedding  # the same text, the same vector
    assert batch.data[0].embedding != batch.data[2].embedding
    assert batch.usage.prompt_tokens == sum(max(1, len(t) // 4) for t in texts)
    # The SDK asked for base64 (its default): float32s; as numbers, the simulator's own.
    floats = await client.embeddings.create(
        model="embeddings", input="hello", encoding_format="float"
    )
    assert floats.data[0].embedding == vector_of(MODEL, "hello")
    assert floats.data[0].embedding == pytest.approx(one.data[0].embedding, abs=1e-7)
    short = await client.embeddings.create(model="embeddings", input=texts, dimensions=64)
    assert {len(d.embedding) for d in short.data} == {64}
    await client.close()


async def test_a_failing_deployment_falls_back_to_the_other(env: Env) -> None:
    """Tried cheapest first (a tie: config order), the first deployment is down: its 503
    is a retriable failure and the second answers the same vector."""
    sim = env.stack.providers
    sim.set_outage(EMBEDDING_MODELS[0].provider_id)
    client = env.client()
    try:
        raw = await client.embeddings.with_raw_response.create(
            model="embeddings", input="fall back", extra_body={"provider": {"sort": "price"}}
        )
    finally:
        sim.clear_overrides()
    answer = raw.parse()
    assert raw.headers["x-switchyard-deployment"] == SECOND
    assert raw.headers["x-switchyard-attempts"] == "2"
    assert answer.data[0].embedding == pytest.approx(vector_of(MODEL, "fall back"), abs=1e-7)
    request_id = raw.headers["x-switchyard-request-id"]
    found = await env.records({request_id}, env.stack.topics.outcomes)
    outcomes = sorted(found[env.stack.topics.outcomes], key=lambda o: o["attempt"])
    assert [(o["deployment"], o["status_class"]) for o in outcomes] == [
        (FIRST, "server_error"),
        (SECOND, "success"),
    ]
    assert outcomes[0]["retriable"] and not outcomes[0]["final"]
    await client.close()


async def test_kinds_are_excluded_both_ways_and_no_text_is_recorded(env: Env) -> None:
    secret = f"the-secret-input-{uuid.uuid4().hex}"
    client = env.client()
    embedded = await client.embeddings.with_raw_response.create(
        model="mixed", input=[f"{secret} one", f"{secret} two"]
    )
    assert embedded.headers["x-switchyard-deployment"] in {FIRST, SECOND}
    chat = await client.chat.completions.with_raw_response.create(
        model="mixed", messages=[{"role": "user", "content": "hello"}]
    )
    assert chat.headers["x-switchyard-deployment"] in CHAT_DEPLOYMENTS
    await client.close()
    ids = {embedded.headers["x-switchyard-request-id"], chat.headers["x-switchyard-request-id"]}
    topics = env.stack.topics
    found = await env.records(ids, topics.requests, topics.decisions, topics.outcomes)
    decisions = {d["request_id"]: d for d in found[topics.decisions]}
    embedding = decisions[embedded.headers["x-switchyard-request-id"]]
    excluded = {(e["deployment"], e["reason"]) for e in embedding["excluded"]}
    assert excluded == {(d, "lacks_embeddings") for d in CHAT_DEPLOYMENTS}
    assert {c["deployment"] for c in embedding["candidates"]} <= {FIRST, SECOND}
    chatted = decisions[chat.headers["x-switchyard-request-id"]]
    excluded = {(e["deployment"], e["reason"]) for e in chatted["excluded"]}
    assert excluded == {(FIRST, "lacks_chat"), (SECOND, "lacks_chat")}
    assert secret in json.dumps(found[topics.requests])  # the request has it
    for topic in (topics.decisions, topics.outcomes):
        assert secret not in json.dumps(found[topic]), topic
    (outcome,) = [o for o in found[topics.outcomes] if o["request_id"] == embedding["request_id"]]
    assert outcome["tokens_in"] > 0 and outcome["tokens_out"] == 0
    assert outcome["cost_usd"] == pytest.approx(outcome["tokens_in"] * 0.02 / 1_000_000)


async def test_what_cannot_be_embedded_is_a_400(env: Env) -> None:
    client = env.client()
    with pytest.raises(openai.BadRequestError) as caught:
        await client.embeddings.create(model="embeddings", input=[[1, 2, 3]])
    assert caught.value.code == "unsupported_input"
    assert caught.value.response.headers["x-should-retry"] == "false"
    with pytest.raises(openai.BadRequestError) as caught:
        await client.embeddings.create(model="chat", input="no embeddings model here")
    assert caught.value.code == "no_capable_deployment"
    assert "lacks_embeddings" in caught.value.message
    with pytest.raises(openai.BadRequestError):  # the provider's 400: not retried
        await client.embeddings.create(model="embeddings", input="x", dimensions=4096)
    with pytest.raises(openai.NotFoundError):
        await client.embeddings.create(model="no-such-route", input="x")
    await client.close()


async def test_a_log_with_embeddings_replays_with_no_mismatch(env: Env) -> None:
    client = env.client()
    for index in range(4):
        await client.embeddings.create(model="mixed", input=[f"replayed {index}", "again"])
    await client.close()
    report = await replayed(env.stack, timeout_s=180)
    assert report["ok"] and report["reproduced"] == report["decisions"] >= 8
    assert report["responses"]["mismatched"] == 0
