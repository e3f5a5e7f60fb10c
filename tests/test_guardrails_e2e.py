"""Guardrails on text end to end: the official ``openai`` SDK through the gateway and the
embedded stack, from a provider whose answers hold a card number and an e-mail address,
or a secret keyword. Streamed and not, the client reads the answer redacted; a blocked
answer ends with a clear error naming the rule (a stream: after the text released
before it), never with the blocked text; the outcome records the rules that fired and
no topic holds the card number. The provider is sent a prompt's card number redacted,
and a prompt an input rule blocks is refused with a 400 naming the rule."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
import yaml
from aiohttp import web
from stack_helpers import provider_and_gateway

from app.client import read_topics
from app.embedded.broker import EmbeddedBroker
from app.embedded.stack import EmbeddedStack
from app.gateway.keys import hash_key
from app.gateway.run import RunningGateway

pytestmark = pytest.mark.broker

KEY = "sk-test-guardrails-" + "g" * 20
CARD = "4111 1111 1111 1111"
FILLER = " ".join(["the", "answer", "goes", "on"] * 30)
#: The user messages the provider was sent.
SEEN: list[str] = []
ANSWERS = {
    "pii": f"{FILLER} Pay with card {CARD} and write to jane.doe@example.org today. {FILLER}",
    "secret": f"{FILLER} {FILLER} It is about Project Nightingale, you know. {FILLER}",
}
REDACTED = (
    ANSWERS["pii"]
    .replace(CARD, "[REDACTED:card_number]")
    .replace("jane.doe@example.org", "[REDACTED:email]")
)


def _chunk(model: str, delta: dict[str, Any], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    body = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": model}
    return f"data: {json.dumps({**body, 'choices': [choice]})}\n\n".encode()


async def _answer(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    model = str(body["model"])
    SEEN.extend(str(m.get("content")) for m in body["messages"] if m.get("role") == "user")
    text = ANSWERS[model]
    usage = {"prompt_tokens": 5, "completion_tokens": 50, "total_tokens": 55}
    if body.get("stream") is not True:
        message = {"role": "assistant", "content": text}
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        return web.json_response(
            {"id": "c1", "object": "chat.completion", "created": 1, "model": model,
             "choices": [choice], "usage": usage}
        )  # fmt: skip
    reply = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await reply.prepare(request)
    await reply.write(_chunk(model, {"role": "assistant", "content": ""}))
    for index, word in enumerate(text.split(" ")):
        await reply.write(_chunk(model, {"content": word if index == 0 else f" {word}"}))
    await reply.write(_chunk(model, {}, "stop"))
    await reply.write(b"data: [DONE]\n\n")
    await reply.write_eof()
    return reply


def _config(base_url: str) -> str:
    document = {
        "providers": [
            {"id": model, "base_url": f"{base_url}/v1", "models": [{"name": model}]}
            for model in ANSWERS
        ],
        "routes": {model: {"providers": [model]} for model in ANSWERS},
        "default_route": "pii",
        "guardrails": {
            "input": [
                {"name": "cards-in", "action": "redact", "detect": ["card_number"]},
                {"name": "topic", "action": "block", "keywords": ["forbidden topic"]},
            ],
            "output": [
                {"name": "pii", "action": "redact", "detect": ["card_number", "email"]},
                {"name": "nightingale", "action": "block", "keywords": ["project nightingale"],
                 "routes": ["secret"]},
            ]
        },
        "gateway_keys": [{"sha256": hash_key(KEY), "name": "guarded"}],
    }  # fmt: skip
    return str(yaml.safe_dump(document, sort_keys=False))


class Env:
    def __init__(self, stack: EmbeddedStack, gateway: RunningGateway) -> None:
        self.stack, self.gateway = stack, gateway

    def client(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(
            base_url=f"{self.gateway.url}/v1", api_key=KEY, max_retries=0, timeout=30
        )


@pytest.fixture(scope="module")
async def env(broker: EmbeddedBroker) -> AsyncIterator[Env]:
    async with provider_and_gateway(broker, [("/v1/chat/completions", _answer)], _config) as (
        stack,
        gateway,
    ):
        yield Env(stack, gateway)


async def _stream(client: openai.AsyncOpenAI, model: str, text: list[str]) -> None:
    stream = await client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": uuid.uuid4().hex}], stream=True
    )
    async for chunk in stream:
        if chunk.choices:
            text.append(chunk.choices[0].delta.content or "")


async def test_a_card_number_is_redacted_streamed_and_not_and_never_recorded(env: Env) -> None:
    client = env.client()
    text: list[str] = []
    await _stream(client, "pii", text)
    assert "".join(text) == REDACTED
    whole = await client.chat.completions.create(
        model="pii", messages=[{"role": "user", "content": uuid.uuid4().hex}]
    )
    assert whole.choices[0].message.content == REDACTED
    ids = {whole.id.removeprefix("chatcmpl-")}
    t = env.stack.topics
    records = await read_topics(
        env.stack.broker.bootstrap,
        [t.outcomes, t.responses, t.routing, t.decisions],
        lambda found: len(found[t.outcomes]) >= 2 and len(found[t.responses]) >= 2,
        timeout_s=30,
    )
    assert all(o["output_rules"] == ["pii:redact"] for o in records[t.outcomes])
    assert CARD not in json.dumps(records) and "jane.doe" not in json.dumps(records)
    assert ids  # the answers were read back above


async def test_a_blocked_answer_ends_with_an_error_naming_the_rule_not_the_text(
    env: Env,
) -> None:
    client = env.client()
    text: list[str] = []
    with pytest.raises(openai.APIError) as streamed:
        await _stream(client, "secret", text)
    assert "Nightingale" not in "".join(text) and "".join(text).startswith("the answer")
    assert "nightingale" in str(streamed.value)  # the rule's name
    with pytest.raises(openai.BadRequestError) as whole:
        await client.chat.completions.create(
            model="secret", messages=[{"role": "user", "content": uuid.uuid4().hex}]
        )
    body = whole.value.body if isinstance(whole.value.body, dict) else {}
    assert body.get("code") == "output_blocked"
    assert "Project Nightingale" not in str(body)


async def test_the_provider_is_sent_a_prompt_redacted_and_a_blocked_prompt_is_refused(
    env: Env,
) -> None:
    client = env.client()
    # Letters only: a uuid's hex digits can hold a run the card detector rightly redacts.
    marker = uuid.uuid4().hex.translate(str.maketrans("0123456789", "ghijklmnop"))
    await client.chat.completions.create(
        model="pii", messages=[{"role": "user", "content": f"{marker} my card is {CARD}"}]
    )
    assert f"{marker} my card is [REDACTED:card_number]" in SEEN
    assert not any(CARD in seen for seen in SEEN)
    with pytest.raises(openai.BadRequestError) as refused:
        await client.chat.completions.create(
            model="pii", messages=[{"role": "user", "content": "tell me the Forbidden  Topic"}]
        )
    body = refused.value.body if isinstance(refused.value.body, dict) else {}
    assert body.get("code") == "input_blocked" and "'topic'" in str(body.get("message"))
