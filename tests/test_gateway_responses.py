"""OpenAI's Responses API through the gateway, driven with the official ``openai`` SDK
against the embedded stack: create, stream, retrieve, conversations rebuilt from the log
(``previous_response_id``), ``store: false``, tenants, and a replay of it all.

One stack for the module; its provider (a small mock) answers from what it was sent, so a
test sees the whole history the gateway rebuilt. The gateway's lookup window is one
record: everything here that finds a turn does it by position, never by luck.
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
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from stack_helpers import provider_and_gateway, replayed, warm_up_gateway

from app.embedded.broker import EmbeddedBroker
from app.embedded.stack import EmbeddedStack
from app.gateway.keys import hash_key
from app.gateway.run import RunningGateway, start_gateway

pytestmark = pytest.mark.broker

KEY = "sk-test-resp-acme-" + "a" * 20
KEY_OTHER = "sk-test-resp-other-" + "b" * 20
KEY_ADMIN = "sk-test-resp-admin-" + "c" * 20
#: Every body the provider was sent, in order.
SENT: list[dict[str, Any]] = []
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "the weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def _reply_to(messages: list[dict[str, Any]]) -> str:
    """What the provider answers: the last message's text and how many it was sent."""
    last = messages[-1]
    content = last.get("content")
    text = content if isinstance(content, str) else json.dumps(content)
    return f"re: {text} ({len(messages)} messages) é ✓"


def _chunk(delta: dict[str, Any], finish: str | None = None, **more: Any) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    body = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m1"}
    return f"data: {json.dumps({**body, 'choices': [choice], **more})}\n\n".encode()


async def _answer(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    SENT.append(body)
    messages = body["messages"]
    usage = {"prompt_tokens": 10 * len(messages), "completion_tokens": 7, "total_tokens": 0}
    usage["total_tokens"] = usage["prompt_tokens"] + 7
    message: dict[str, Any] = {"role": "assistant", "content": _reply_to(messages)}
    finish = "stop"
    if body.get("tools") and messages[-1]["role"] != "tool":
        function = {"name": "get_weather", "arguments": '{"city": "Paris"}'}
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "call_7", "type": "function", "function": function}],
        }
        finish = "tool_calls"
    if body.get("stream") is not True:
        choice = {"index": 0, "message": message, "finish_reason": finish}
        return web.json_response(
            {"id": "c1", "object": "chat.completion", "created": 1, "model": "m1",
             "choices": [choice], "usage": usage}
        )  # fmt: skip
    reply = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await reply.prepare(request)
    await reply.write(_chunk({"role": "assistant", "content": ""}))
    if message.get("tool_calls"):
        call = {"index": 0, **message["tool_calls"][0]}
        await reply.write(_chunk({"tool_calls": [call]}))
    else:
        for index, word in enumerate(message["content"].split(" ")):
            await reply.write(_chunk({"content": word if index == 0 else f" {word}"}))
            await asyncio.sleep(0.03)  # past the executor's flush interval: several deltas
    await reply.write(_chunk({}, finish))
    await reply.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
    await reply.write(b"data: [DONE]\n\n")
    await reply.write_eof()
    return reply


def _config(base_url: str) -> str:
    document = {
        "providers": [{"id": "mock", "base_url": f"{base_url}/v1", "models": [{"name": "m1"}]}],
        "routes": {"chat": {"providers": ["mock"]}},
        "default_route": "chat",
        "gateway_keys": [
            {"sha256": hash_key(KEY), "tenant": "acme", "name": "acme-app"},
            {"sha256": hash_key(KEY_OTHER), "tenant": "other", "name": "other-app"},
            {"sha256": hash_key(KEY_ADMIN), "name": "admin"},
        ],
    }
    return str(yaml.safe_dump(document, sort_keys=False))


class Env:
    def __init__(self, stack: EmbeddedStack, gateway: RunningGateway) -> None:
        self.stack, self.gateway = stack, gateway

    def client(self, key: str = KEY, gateway: RunningGateway | None = None) -> openai.AsyncOpenAI:
        url = f"{(gateway or self.gateway).url}/v1"
        return openai.AsyncOpenAI(base_url=url, api_key=key, max_retries=0, timeout=30)


@pytest.fixture(scope="module")
async def env(broker: EmbeddedBroker) -> AsyncIterator[Env]:
    env = {"SWITCHYARD_REQUEST_DEADLINE_S": "20"}
    # A window of one record: any lookup that relied on it would miss.
    window = {"gateway_lookup_window": 1}
    routes = [("/v1/chat/completions", _answer)]
    async with provider_and_gateway(broker, routes, _config, env, window) as (stack, gateway):
        warm = [("chat", [{"role": "user", "content": "warm"}])]
        errors = openai.APIStatusError
        await warm_up_gateway(gateway.url, KEY, warm, tries=30, errors=errors, pause_s=0.5)
        yield Env(stack, gateway)


async def test_a_response_is_created_and_retrieved(env: Env) -> None:
    client = env.client()
    raw = await client.responses.with_raw_response.create(
        model="chat", input="hello", instructions="be brief", max_output_tokens=50
    )
    response = raw.parse()
    assert response.object == "response" and response.status == "completed"
    assert response.id.startswith("resp_acme.")
    assert raw.headers["x-switchyard-request-id"] in response.id
    assert response.model == "m1" and response.previous_response_id is None
    assert response.instructions == "be brief" and response.max_output_tokens == 50
    assert response.output_text == "re: hello (2 messages) é ✓"
    assert response.usage is not None
    assert (response.usage.input_tokens, response.usage.output_tokens) == (20, 7)
    assert response.usage.total_tokens == 27
    assert SENT[-1]["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hello"},
    ]
    assert SENT[-1]["max_tokens"] == 50
    again = await client.responses.retrieve(response.id)
    assert again.model_dump() == response.model_dump()
    await client.close()


async def test_a_stream_is_the_responses_events_and_the_same_text(env: Env) -> None:
    client = env.client()
    whole = await client.responses.create(model="chat", input="stream me")
    async with client.responses.stream(model="chat", input="stream me") as stream:
        kinds = [event.type async for event in stream]
        final = await stream.get_final_response()
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert kinds.count("response.output_text.delta") > 2  # piece by piece, from the deltas
    assert final.output_text == whole.output_text == "re: stream me (1 messages) é ✓"
    assert final.status == "completed" and final.usage is not None
    assert whole.usage is not None and final.usage.total_tokens == whole.usage.total_tokens
    stored = await client.responses.retrieve(final.id)
    assert stored.output_text == final.output_text

    events = [e async for e in await client.responses.create(model="chat", input="x", stream=True)]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text == "re: x (1 messages) é ✓"
    await client.close()


async def test_a_five_turn_conversation_is_rebuilt_from_the_log_and_replays(env: Env) -> None:
    """Each turn sends only its new input; the provider is sent the whole conversation.
    Between turns, records pile up on the previous request's partition (past the one-record
    window); the fifth turn goes through another gateway that never saw the others."""
    client = env.client()
    turns = []
    previous: str | None = None
    second = await start_gateway(
        env.stack.gateway_settings().model_copy(
            update={"gateway_lookup_window": 1, "gateway_reply_partitions": [1]}
        )
    )
    try:
        for number in range(5):
            asker = env.client(gateway=second) if number == 4 else client
            text = f"turn {number}"
            if number == 2:  # one turn streamed
                async with asker.responses.stream(
                    model="chat", input=text, previous_response_id=previous
                ) as stream:
                    response = await stream.get_final_response()
            else:
                response = await asker.responses.create(
                    model="chat", input=text, previous_response_id=previous
                )
            assert response.previous_response_id == previous
            assert response.output_text == f"re: {text} ({2 * number + 1} messages) é ✓"
            turns.append(response)
            previous = response.id
            await _pile_up(env, response.id)
    finally:
        await second.stop()
    expected: list[dict[str, Any]] = []
    for number, response in enumerate(turns):
        expected += [{"role": "user", "content": f"turn {number}"}]
        assert SENT[-5 + number]["messages"] == expected
        expected += [{"role": "assistant", "content": response.output_text}]

    # The fifth turn's record names the fourth's records by position.
    records = await _records_at(env, turns)
    last = records[-1]
    link = last["turn"]["previous"]
    assert link["response_id"] == turns[3].id
    fourth = await _read_at(env, link["request"])
    assert fourth["request_id"] == records[3]["request_id"]
    answer = await _read_at(env, link["response"])
    assert answer["type"] == "chat.response" and answer["request_id"] == fourth["request_id"]
    assert all("content" not in json.dumps(r["turn"]) for r in records)  # positions only

    for response in turns:  # each turn stays retrievable, by position
        stored = await client.responses.retrieve(response.id)
        assert stored.output_text == response.output_text
        assert stored.previous_response_id == response.previous_response_id
    await client.close()

    report = await replayed(env.stack)
    assert report["ok"] and report["reproduced"] == report["decisions"] >= 5
    assert report["responses"]["mismatched"] == 0


async def test_tool_calls_and_their_outputs_carry_over(env: Env) -> None:
    client = env.client()
    called = await client.responses.create(model="chat", input="weather?", tools=[WEATHER])
    call = called.output[0]
    assert call.type == "function_call" and call.name == "get_weather"
    assert json.loads(call.arguments) == {"city": "Paris"}
    assert SENT[-1]["tools"][0]["function"]["name"] == "get_weather"
    output = {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}
    done = await client.responses.create(
        model="chat", input=[output], tools=[WEATHER], previous_response_id=called.id
    )
    assert done.output_text == "re: sunny (3 messages) é ✓"
    sent = SENT[-1]["messages"]
    assert sent[1]["tool_calls"][0]["id"] == call.call_id
    assert sent[2] == {"role": "tool", "tool_call_id": call.call_id, "content": "sunny"}
    await client.close()


async def test_store_false_is_neither_retrieved_nor_continued(env: Env) -> None:
    client = env.client()
    response = await client.responses.create(model="chat", input="forget me", store=False)
    assert response.status == "completed" and response.store is False
    with pytest.raises(openai.NotFoundError) as retrieved:
        await client.responses.retrieve(response.id)
    assert "store: false" in retrieved.value.message
    with pytest.raises(openai.NotFoundError) as continued:
        await client.responses.create(model="chat", input="and?", previous_response_id=response.id)
    assert continued.value.code == "previous_response_not_found"
    await client.close()


async def test_another_tenants_response_is_not_found(env: Env) -> None:
    own = env.client()
    response = await own.responses.create(model="chat", input="mine")
    for key in (KEY_OTHER, KEY_ADMIN):
        other = env.client(key)
        with pytest.raises(openai.NotFoundError) as continued:
            await other.responses.create(
                model="chat", input="theirs?", previous_response_id=response.id
            )
        assert continued.value.code == "previous_response_not_found"
        with pytest.raises(openai.NotFoundError):
            await other.responses.retrieve(response.id)
        await other.close()
    for unknown in ("resp_acme.nope_0_0", "resp_nope", "nope", "resp_a_1_99999999"):
        with pytest.raises(openai.NotFoundError):
            await own.responses.retrieve(unknown)
    await own.close()


async def test_errors_are_openai_errors(env: Env) -> None:
    client = env.client()
    with pytest.raises(openai.NotFoundError) as unknown:
        await client.responses.create(model="no-such-model", input="hi")
    assert unknown.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as hosted:
        await client.responses.create(
            model="chat", input="hi", tools=[{"type": "web_search_preview"}]
        )
    assert hosted.value.code == "unsupported_tool"
    with pytest.raises(openai.AuthenticationError):
        await env.client("sk-wrong").responses.create(model="chat", input="hi")
    await client.close()


async def _pile_up(env: Env, response_id: str, count: int = 5) -> None:
    """Records on the partition a response's request went to, after it."""
    partition = int(response_id.split("_")[-2])
    producer = AIOKafkaProducer(bootstrap_servers=env.stack.broker.bootstrap)
    await producer.start()
    try:
        for index in range(count):
            value = json.dumps({"filler": index}).encode()
            await producer.send_and_wait(env.stack.topics.requests, value, partition=partition)
    finally:
        await producer.stop()


async def _records_at(env: Env, turns: list[Any]) -> list[dict[str, Any]]:
    """The ``llm.requests`` records of ``turns``, read where their ids say they are."""
    found = []
    for response in turns:
        _, partition, offset = response.id.rsplit("_", 2)
        position = {"topic": env.stack.topics.requests, "partition": partition, "offset": offset}
        found.append(await _read_at(env, position))
    return found


async def _read_at(env: Env, position: dict[str, Any]) -> dict[str, Any]:
    consumer = AIOKafkaConsumer(bootstrap_servers=env.stack.broker.bootstrap, group_id=None)
    await consumer.start()
    try:
        tp = TopicPartition(position["topic"], int(position["partition"]))
        consumer.assign([tp])
        consumer.seek(tp, int(position["offset"]))
        for _ in range(50):
            records = (await consumer.getmany(tp, timeout_ms=200)).get(tp, [])
            for record in records:
                assert record.offset == int(position["offset"])
                return dict(json.loads(record.value or b"{}"))
        raise AssertionError(f"nothing at {position}")
    finally:
        await consumer.stop()
