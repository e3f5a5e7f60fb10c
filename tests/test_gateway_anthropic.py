"""Anthropic's Messages API on the gateway, driven with the official ``anthropic`` SDK against
the embedded stack and an LLMock provider (which calls an offered tool, then answers once
the tool's result comes back, and echoes the prompt otherwise).

The SDK sends its key as ``Authorization: Bearer`` (``api_key`` and ``auth_token`` alike);
``x-api-key``, which Claude Code and older SDKs send, is checked on the wire.

Routes: ``chat`` (LLMock as a provider that takes no cache marks) and ``cached`` (the same
LLMock declared ``cache_control: true``).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anthropic
import httpx
import httpx2
import pytest
import yaml
from anthropic.types import CacheControlEphemeralParam, MessageParam, TextBlockParam, ToolParam
from llmock.scenarios import Delay, StreamFault
from llmock.simulation import MockResponseSettings
from llmock.testing import LLMockServer

from app.client import read_topics
from app.embedded.broker import EmbeddedBroker
from app.embedded.stack import EmbeddedStack
from app.gateway.keys import hash_key
from app.gateway.run import RunningGateway, start_gateway

pytestmark = pytest.mark.broker

KEY = "sk-test-claude-" + "a" * 20
KEY_TINY = "sk-test-claude-tiny-" + "b" * 20
KEY_METERED = "sk-test-metered-" + "c" * 24
HELLO: list[MessageParam] = [{"role": "user", "content": "hello there"}]
WEATHER: ToolParam = {
    "name": "get_weather",
    "description": "the weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
MARK: CacheControlEphemeralParam = {"type": "ephemeral"}


def _providers_yaml(mock: LLMockServer) -> str:
    base = {"base_url": mock.base_url("openai"), "api_key": "sk-mock-0000", "timeout_ms": 10_000}
    model = {"models": [{"name": "gpt-4o-mini"}], "max_concurrency": 50}
    config: dict[str, Any] = {
        "providers": [
            {"id": "mock", **base, **model},
            {"id": "mockcache", **base, **model, "cache_control": True},
        ],
        "routes": {
            "chat": {"providers": ["mock"], "max_attempts": 1},
            "cached": {"providers": ["mockcache"], "max_attempts": 1},
        },
        "default_route": "chat",
        "tenants": {"tiny": {"rate_limit": {"requests": 1, "window_s": 600}}},
        "budgets": [{"scope": "tenant", "name": "metered", "requests_per_hour": 1}],
        "gateway_keys": [
            {"sha256": hash_key(KEY), "name": "claude"},
            {"sha256": hash_key(KEY_TINY), "tenant": "tiny"},
            {"sha256": hash_key(KEY_METERED), "tenant": "metered"},
        ],
    }
    return str(yaml.safe_dump(config))


class Env:
    def __init__(self, stack: EmbeddedStack, gateway: RunningGateway, mock: LLMockServer):
        self.stack, self.gateway, self.mock = stack, gateway, mock
        self.sent = 0  # HTTP requests the counting clients made

    async def count(self, _request: httpx2.Request) -> None:
        self.sent += 1

    def client(
        self, key: str = KEY, max_retries: int = 0, url: str | None = None
    ) -> anthropic.AsyncAnthropic:
        """An SDK client that counts the HTTP requests it makes (its retries too)."""
        http = httpx2.AsyncClient(event_hooks={"request": [self.count]})
        return anthropic.AsyncAnthropic(
            base_url=url or self.gateway.url,
            api_key=key,
            max_retries=max_retries,
            http_client=http,
        )

    def bodies(self) -> list[Any]:
        """What LLMock was asked, in order."""
        return [r.body for r in self.mock.state.journal.records()]


@pytest.fixture(scope="module")
def mock() -> Iterator[LLMockServer]:
    with LLMockServer(responses=MockResponseSettings(response_style="echo")) as server:
        yield server


@pytest.fixture(scope="module")
async def env(broker: EmbeddedBroker, mock: LLMockServer) -> AsyncIterator[Env]:
    stack = EmbeddedStack(
        broker=broker,
        namespace=f"a{uuid.uuid4().hex[:8]}",
        simulated=False,
        providers_yaml=_providers_yaml(mock),
        env={"SWITCHYARD_REQUEST_DEADLINE_S": "10"},
    )
    await stack.start(workers=1)
    gateway = await start_gateway(stack.gateway_settings())
    try:
        env = Env(stack, gateway, mock)
        await _warm_up(env)
        yield env
    finally:
        await gateway.stop()
        await stack.stop()


async def _warm_up(env: Env) -> None:
    """Until the worker has joined, requests wait in the log past the deadline."""
    client = env.client()
    for _ in range(30):
        try:
            await client.messages.create(model="chat", max_tokens=16, messages=HELLO)
            break
        except anthropic.APIStatusError:
            continue
    await client.close()


async def test_a_message_with_a_bearer_key_and_with_x_api_key(env: Env) -> None:
    client = env.client()
    raw = await client.messages.with_raw_response.create(
        model="chat", max_tokens=64, messages=[{"role": "user", "content": "name a colour"}]
    )
    message = await raw.parse()
    assert message.type == "message" and message.role == "assistant"
    assert message.id.startswith("msg_") and message.model == "gpt-4o-mini"
    assert message.content[0].type == "text"
    assert "name a colour" in message.content[0].text  # LLMock echoes the prompt
    assert message.stop_reason == "end_turn" and message.stop_sequence is None
    assert message.usage.input_tokens > 0 and message.usage.output_tokens > 0
    assert raw.headers["x-switchyard-deployment"] == "mock:gpt-4o-mini"
    assert env.mock.state.journal.records()[-1].path == "/v1/chat/completions"
    await client.close()
    token = anthropic.AsyncAnthropic(base_url=env.gateway.url, auth_token=KEY, max_retries=0)
    again = await token.messages.create(model="chat", max_tokens=64, messages=HELLO)
    assert again.content[0].type == "text" and again.content[0].text
    await token.close()
    body = {"model": "chat", "max_tokens": 16, "messages": HELLO}
    async with httpx.AsyncClient(timeout=30) as http:
        reply = await http.post(
            f"{env.gateway.url}/v1/messages",
            json=body,
            headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"},
        )
    assert reply.status_code == 200 and reply.json()["type"] == "message"


async def test_what_reaches_the_provider(env: Env) -> None:
    client = env.client()
    await client.messages.create(
        model="chat",
        max_tokens=33,
        extra_body={"temperature": 0.25},  # gone from the SDK, still taken
        system="You are terse.",
        stop_sequences=["END"],
        metadata={"user_id": "user-7"},
        messages=[{"role": "user", "content": [{"type": "text", "text": "say hi"}]}],
    )
    sent = env.bodies()[-1]
    assert sent["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "say hi"},
    ]
    assert sent["max_tokens"] == 33 and sent["temperature"] == 0.25 and sent["stop"] == ["END"]
    await client.close()


async def test_a_stream_says_what_the_answer_says(env: Env) -> None:
    client = env.client()
    asked: dict[str, Any] = {
        "model": "chat",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "tell me about streams"}],
    }
    whole = await client.messages.create(**asked)
    async with client.messages.stream(**asked) as stream:
        texts = [text async for text in stream.text_stream]
        final = await stream.get_final_message()
    assert whole.content[0].type == "text" and final.content[0].type == "text"
    assert "".join(texts) == final.content[0].text == whole.content[0].text
    assert final.stop_reason == "end_turn" and final.model == "gpt-4o-mini"
    assert final.usage.output_tokens == whole.usage.output_tokens
    events = [event.type async for event in await client.messages.create(**asked, stream=True)]
    assert events[0] == "message_start" and events[1] == "content_block_start"
    assert events[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(events[2:-3]) == {"content_block_delta"}
    await client.close()


async def test_the_stream_on_the_wire_has_anthropic_event_lines_and_a_ping(env: Env) -> None:
    body = {"model": "chat", "max_tokens": 32, "messages": HELLO, "stream": True}
    headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
    names = []
    async with (
        httpx.AsyncClient(timeout=30) as http,
        http.stream("POST", f"{env.gateway.url}/v1/messages", json=body, headers=headers) as reply,
    ):
        assert reply.status_code == 200
        assert reply.headers["content-type"].startswith("text/event-stream")
        async for line in reply.aiter_lines():
            if line.startswith("event: "):
                names.append(line.removeprefix("event: "))
    assert names[:4] == ["message_start", "content_block_start", "ping", "content_block_delta"]
    assert names[-1] == "message_stop"


@pytest.mark.parametrize("stream", [False, True])
async def test_a_tool_use_round_trip(env: Env, stream: bool) -> None:
    client = env.client()
    messages: list[MessageParam] = [{"role": "user", "content": "What is the weather?"}]
    first: anthropic.types.Message
    if stream:
        async with client.messages.stream(
            model="chat", max_tokens=128, tools=[WEATHER], messages=messages
        ) as events:
            first = await events.get_final_message()
    else:
        first = await client.messages.create(
            model="chat", max_tokens=128, tools=[WEATHER], messages=messages
        )
    assert first.stop_reason == "tool_use"
    (use,) = [block for block in first.content if block.type == "tool_use"]
    assert use.name == "get_weather" and isinstance(use.input, dict) and "city" in use.input
    messages += [
        {"role": "assistant", "content": first.content},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny, 21°C"}],
        },
    ]
    second = await client.messages.create(
        model="chat", max_tokens=128, tools=[WEATHER], messages=messages
    )
    assert second.stop_reason == "end_turn"
    assert second.content[0].type == "text" and second.content[0].text
    sent = env.bodies()[-1]
    assert sent["messages"][1]["tool_calls"][0]["id"] == use.id
    assert json.loads(sent["messages"][1]["tool_calls"][0]["function"]["arguments"]) == use.input
    assert sent["messages"][2] == {"role": "tool", "tool_call_id": use.id, "content": "sunny, 21°C"}
    assert sent["tools"][0]["function"]["parameters"] == WEATHER["input_schema"]
    await client.close()


async def test_cache_marks_reach_only_a_provider_that_takes_them(env: Env) -> None:
    client = env.client()
    system: list[TextBlockParam] = [
        {"type": "text", "text": "Long, stable instructions.", "cache_control": MARK}
    ]
    for route in ("cached", "chat"):
        await client.messages.create(model=route, max_tokens=16, system=system, messages=HELLO)
    taken, stripped = env.bodies()[-2:]
    assert taken["messages"][0]["content"] == system
    assert stripped["messages"][0]["content"] == [
        {"type": "text", "text": "Long, stable instructions."}
    ]
    await client.close()


async def test_a_stream_cut_by_the_provider_ends_with_an_error_event(env: Env) -> None:
    env.mock.state.scenarios.add(StreamFault("disconnect", after_chunks=3))
    client = env.client()
    texts = []
    with pytest.raises(anthropic.APIStatusError) as cut:
        async with client.messages.stream(
            model="chat", max_tokens=64, messages=[{"role": "user", "content": "a long story"}]
        ) as stream:
            async for text in stream.text_stream:
                texts.append(text)
    assert texts  # the client had some of the answer: the error came as an event
    assert isinstance(cut.value.body, dict) and cut.value.body["type"] == "error"
    assert "the stream was interrupted" in cut.value.body["error"]["message"]
    await client.close()


async def test_errors_are_anthropic_errors(env: Env) -> None:
    with pytest.raises(anthropic.AuthenticationError) as wrong_key:
        await env.client("sk-wrong").messages.create(model="chat", max_tokens=8, messages=HELLO)
    assert wrong_key.value.body == {
        "type": "error",
        "error": {"type": "authentication_error", "message": "invalid API key"},
    }
    with pytest.raises(anthropic.NotFoundError) as unknown:
        await env.client().messages.create(model="no-such-model", max_tokens=8, messages=HELLO)
    assert isinstance(unknown.value.body, dict)
    assert unknown.value.body["error"]["type"] == "not_found_error"
    assert unknown.value.response.headers["x-switchyard-error-code"] == "model_not_found"
    with pytest.raises(anthropic.BadRequestError) as document:
        await env.client().messages.create(
            model="chat",
            max_tokens=8,
            messages=[
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "document",
                            "source": {"type": "text", "media_type": "text/plain", "data": "x"},
                        }
                    ],
                }
            ],
        )
    assert "'document'" in document.value.message
    async with httpx.AsyncClient(timeout=30) as http:
        url = f"{env.gateway.url}/v1/messages"
        headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
        no_max = await http.post(url, json={"model": "chat", "messages": HELLO}, headers=headers)
        no_version = await http.post(
            url,
            json={"model": "chat", "max_tokens": 8, "messages": HELLO},
            headers={"x-api-key": KEY},
        )
        counting = await http.post(f"{url}/count_tokens", json={}, headers=headers)
    assert no_max.status_code == 400 and "max_tokens" in no_max.json()["error"]["message"]
    assert no_max.json()["error"]["type"] == "invalid_request_error"
    assert no_version.status_code == 400 and "anthropic-version" in no_version.text
    assert counting.status_code == 404 and counting.json()["type"] == "error"


async def test_a_tenant_rate_limit_is_a_rate_limit_error_not_retried(env: Env) -> None:
    client = env.client(KEY_TINY, max_retries=3)
    assert (await client.messages.create(model="chat", max_tokens=8, messages=HELLO)).content
    before = env.sent
    with pytest.raises(anthropic.RateLimitError) as limited:
        await client.messages.create(model="chat", max_tokens=8, messages=HELLO)
    assert env.sent - before == 1  # x-should-retry: false: the SDK did not retry
    headers = limited.value.response.headers
    assert headers["x-should-retry"] == "false" and int(headers["retry-after"]) > 0
    assert limited.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
    await client.close()


async def test_a_request_limit_is_a_rate_limit_error_with_retry_after(env: Env) -> None:
    """The next hour would take it: ``Retry-After`` says when, and the SDK may retry then
    (this SDK waits the whole ``Retry-After``, so it is not let retry here)."""
    client = env.client(KEY_METERED)
    assert (await client.messages.create(model="chat", max_tokens=8, messages=HELLO)).content
    with pytest.raises(anthropic.RateLimitError) as limited:
        await client.messages.create(model="chat", max_tokens=8, messages=HELLO)
    headers = limited.value.response.headers
    assert 0 < int(headers["retry-after"]) <= 3600 and "x-should-retry" not in headers
    await client.close()


async def test_a_busy_gateway_is_a_rate_limit_error_the_sdk_retries(env: Env) -> None:
    settings = env.stack.gateway_settings().model_copy(
        update={"gateway_max_waiting": 1, "gateway_reply_partitions": [1]}
    )
    second = await start_gateway(settings)
    try:
        env.mock.state.scenarios.add(Delay(2.0))  # the next call holds the one place
        slow = env.client(url=second.url)
        waiting = asyncio.create_task(
            slow.messages.create(model="chat", max_tokens=8, messages=HELLO)
        )
        await asyncio.sleep(0.5)
        with pytest.raises(anthropic.RateLimitError) as busy:
            await env.client(url=second.url).messages.create(
                model="chat", max_tokens=8, messages=HELLO
            )
        headers = busy.value.response.headers
        assert headers["retry-after"] == "1" and "x-should-retry" not in headers
        assert headers["x-switchyard-error-code"] == "gateway_busy"
        patient = env.client(url=second.url, max_retries=5)
        before = env.sent
        answer = await patient.messages.create(model="chat", max_tokens=8, messages=HELLO)
        assert answer.content and env.sent - before >= 2  # refused, waited, retried
        assert (await waiting).content
        await slow.close()
        await patient.close()
    finally:
        await second.stop()


async def test_no_prompt_text_in_decisions_or_outcomes(env: Env) -> None:
    secret = f"the-secret-prompt-{uuid.uuid4().hex}"
    client = env.client()
    raw = await client.messages.with_raw_response.create(
        model="chat",
        max_tokens=16,
        system=[{"type": "text", "text": f"{secret} system", "cache_control": MARK}],
        messages=[{"role": "user", "content": f"{secret} user"}],
    )
    request_id = raw.headers["x-switchyard-request-id"]
    await client.close()
    topics = env.stack.topics
    wanted = (topics.requests, topics.decisions, topics.outcomes)

    def mine(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [r for r in records if r.get("request_id") == request_id]

    found = await read_topics(
        env.stack.broker.bootstrap,
        wanted,
        lambda seen: all(mine(seen[t]) for t in wanted),
        timeout_s=60,
    )
    assert secret in json.dumps(mine(found[topics.requests]))  # the request has it
    for topic in (topics.decisions, topics.outcomes):
        assert mine(found[topic]), topic
        assert secret not in json.dumps(found[topic]), topic


async def test_streams_and_answers_keep_their_request_id(env: Env) -> None:
    rid = f"claude-{uuid.uuid4().hex[:8]}"
    client = env.client()
    raw = await client.messages.with_raw_response.create(
        model="chat",
        max_tokens=16,
        messages=HELLO,
        extra_headers={"x-switchyard-request-id": rid},
    )
    message = await raw.parse()
    assert raw.headers["x-switchyard-request-id"] == rid and message.id == f"msg_{rid}"
    await client.close()
