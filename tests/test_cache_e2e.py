"""The response cache end to end: the OpenAI SDK through the gateway, one worker on the
embedded broker, a route with ``cache`` in front of a provider that counts its calls.

The second identical ``temperature: 0`` question is answered from the cache (the same
answer, a decision with ``selection_rule: cache`` and cost 0, no call), streamed or not;
``temperature: 0.7`` is called every time; the log replays with 0 mismatches.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
import yaml
from aiohttp import web
from stack_helpers import LocalServer, collect, replayed, stack_and_gateway, warm_up_gateway

from app.embedded.broker import EmbeddedBroker
from app.embedded.simulated import SimulatedProviders
from app.embedded.simulated.providers_file import providers_config
from app.embedded.stack import EmbeddedStack
from app.gateway.keys import hash_key
from app.gateway.run import RunningGateway

pytestmark = pytest.mark.broker

KEY = "sk-test-cache-" + "a" * 20
QUESTION = "What is the capital of France? (cache e2e)"


class CountingProvider(LocalServer):
    """An OpenAI-compatible provider whose every answer is new (``answer #N``)."""

    def __init__(self) -> None:
        super().__init__([("/v1/chat/completions", self._chat)])
        self.asked: list[str] = []

    async def _chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        question = body["messages"][-1]["content"]
        self.asked.append(question)
        message = {"role": "assistant", "content": f"answer #{len(self.asked)}: Paris"}
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        usage = {"prompt_tokens": 1000, "completion_tokens": 100, "total_tokens": 1100}
        completion = {"id": f"cmpl-{len(self.asked)}", "object": "chat.completion"}
        completion.update(created=1, model=body["model"], choices=[choice], usage=usage)
        return web.json_response(completion)

    def calls(self, question: str) -> int:
        return self.asked.count(question)


def _providers_yaml(provider: CountingProvider) -> Any:
    def make(sim: SimulatedProviders) -> str:
        config = providers_config(sim.base_urls(), sim.models, time_scale=sim.time_scale)
        config["providers"].append(
            {
                "id": "counting",
                "base_url": f"{provider.url}/v1",
                "models": [{"name": "c1"}],
                "cost_per_mtok_input": 1.0,
                "cost_per_mtok_output": 4.0,
                "max_concurrency": 20,
                "timeout_ms": 5000,
            }
        )
        config["routes"]["cached"] = {"providers": ["counting"], "cache": {"ttl_s": 600}}
        config["gateway_keys"] = [{"sha256": hash_key(KEY), "name": "admin"}]
        return str(yaml.safe_dump(config))

    return make


class Env:
    def __init__(self, stack: EmbeddedStack, gateway: RunningGateway, provider: CountingProvider):
        self.stack, self.gateway, self.provider = stack, gateway, provider

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.gateway.url}/v1", api_key=KEY, max_retries=0)


@pytest.fixture(scope="module")
async def env(broker: EmbeddedBroker) -> AsyncIterator[Env]:
    provider = await CountingProvider().start()
    options = {"time_scale": 0.05, "seed": 1, "providers_yaml": _providers_yaml(provider)}
    try:
        async with stack_and_gateway(broker, "cache", **options) as (stack, gateway):
            asks = [("cached", [{"role": "user", "content": "warm up"}])]
            await warm_up_gateway(gateway.url, KEY, asks, tries=30, errors=openai.APIStatusError)
            yield Env(stack, gateway, provider)
    finally:
        await provider.stop()


def _ask(env: Env, question: str, **kwargs: Any) -> Any:
    def call() -> Any:
        messages = [{"role": "user", "content": question}]
        return env.client().chat.completions.with_raw_response.create(
            model="cached", messages=messages, **kwargs
        )

    return asyncio.to_thread(call)


def _stream(env: Env, question: str, **kwargs: Any) -> Any:
    def call() -> str:
        messages = [{"role": "user", "content": question}]
        chunks = env.client().chat.completions.create(
            model="cached", messages=messages, stream=True, **kwargs
        )
        return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)

    return asyncio.to_thread(call)


async def test_the_second_identical_question_is_answered_from_the_cache(env: Env) -> None:
    first = await _ask(env, QUESTION, temperature=0)
    again = await _ask(env, QUESTION, temperature=0)
    answer = first.parse().choices[0].message.content
    assert answer.startswith("answer #")
    assert again.parse().choices[0].message.content == answer
    assert again.parse().model == "c1"
    assert again.headers["x-switchyard-attempts"] == "0"
    assert env.provider.calls(QUESTION) == 1  # the provider was called once
    # Streamed, the hit comes as one whole answer through the normal reply path.
    assert await _stream(env, QUESTION, temperature=0) == answer
    assert env.provider.calls(QUESTION) == 1

    ids = [first.headers["x-switchyard-request-id"], again.headers["x-switchyard-request-id"]]
    topic = env.stack.topics.decisions
    seen = await collect(env.stack, {topic: 4})
    decisions = {d["request_id"]: d for d in seen[topic]}
    source, hit = decisions[ids[0]], decisions[ids[1]]
    assert source["selection_rule"] != "cache" and source["cache"] is None
    assert hit["selection_rule"] == "cache" and hit["deployment"] == "counting:c1"
    assert hit["cache"]["source_request_id"] == ids[0]
    assert (hit["cache"]["cost_usd"], hit["cache"]["kind"]) == (0.0, "exact")
    assert hit["cache"]["saved_usd"] == pytest.approx((1000 * 1.0 + 100 * 4.0) / 1e6)
    assert not any(answer in json.dumps(d) for d in seen[topic])  # no completion text


async def test_a_temperature_above_zero_is_never_cached(env: Env) -> None:
    question = "Write a haiku about caches. (cache e2e)"
    first = await _ask(env, question, temperature=0.7)
    again = await _ask(env, question, temperature=0.7)
    assert first.parse().choices[0].message.content != again.parse().choices[0].message.content
    assert env.provider.calls(question) == 2


async def test_the_log_with_hits_replays_exactly(env: Env) -> None:
    await _ask(env, "Replay me. (cache e2e)", temperature=0)
    await _ask(env, "Replay me. (cache e2e)", temperature=0)
    report = await replayed(env.stack)
    assert report["mismatched"] == 0
