"""Streaming through the log, end to end: the official ``openai`` SDK against the
gateway, the embedded stack, and simulated providers that stream with faults.

Routes: ``plain`` (a slow stream whose events are split inside UTF-8 characters),
``emoji`` (a surrogate pair split across chunks), ``cutfirst`` (the first deployment
drops before its first token, the second answers), ``cutlater`` (the first deployment
drops after two pieces). Every deployment answers (success rate 1).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import pytest
import yaml
from stack_helpers import gateway_in_front, running_stack, warm_up_gateway

from app.audit.streams import answer_of, read_streams
from app.client import read_topics
from app.embedded.broker import EmbeddedBroker
from app.embedded.simulated import SimulatedProviders
from app.embedded.simulated.providers_file import providers_config
from app.embedded.stack import EmbeddedStack
from app.gateway.keys import hash_key
from app.gateway.relay import STREAM_INTERRUPTED
from app.gateway.run import RunningGateway

pytestmark = pytest.mark.broker

KEY = "sk-test-stream-" + "e" * 20
HELLO = [{"role": "user", "content": "tell me something"}]
#: Multi-byte characters all along (split inside by ``split_bytes``), long enough for
#: a stream of many pieces.
PLAIN = "Ça commence: héllo wörld ✓ — " + "naïve café déjà vu ✓ " * 12 + "fin."
#: The pair of 😀 straddles the first two pieces of 12 UTF-16 code units.
EMOJI = "héllo wörld😀 and 🎉 at the end 🙂"


def _config(sim: SimulatedProviders) -> str:
    config = providers_config(sim.base_urls(), sim.models, time_scale=sim.time_scale)
    for entry in config["providers"]:
        entry.update(timeout_ms=10_000, max_concurrency=50)
    a, b, c, d = sim.provider_ids[:4]
    config["routes"] = {
        "warm": {"providers": [b]},
        "plain": {"providers": [a]},
        "emoji": {"providers": [b]},
        "cutfirst": {"providers": [c, b]},
        "cutlater": {"providers": [d, b]},
    }
    config["default_route"] = "warm"
    config["gateway_keys"] = [{"sha256": hash_key(KEY), "name": "streams"}]
    return str(yaml.safe_dump(config))


class Env:
    def __init__(self, stack: EmbeddedStack, gateway: RunningGateway) -> None:
        self.stack, self.gateway = stack, gateway
        self.ids = stack.providers.provider_ids

    def client(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=f"{self.gateway.url}/v1", api_key=KEY, max_retries=0)


@pytest.fixture(scope="module")
async def env(broker: EmbeddedBroker) -> AsyncIterator[Env]:
    options = {"time_scale": 0.05, "seed": 2, "providers_yaml": _config}
    env = {"SWITCHYARD_REQUEST_DEADLINE_S": "20"}
    async with running_stack(broker, "s", env=env, **options) as stack:
        sim = stack.providers
        a, b, c, d = sim.provider_ids[:4]
        for pid in sim.provider_ids:
            sim.set_success_rate(pid, 1.0)
        sim.set_reply_text(a, PLAIN)
        sim.set_stream_faults(a, split_bytes=True)
        sim.set_latency_factor(a, 40.0)  # a stream of about a second: time to go away mid-way
        sim.set_reply_text(b, EMOJI)
        sim.set_stream_faults(b, split_surrogates=True)
        sim.set_stream_faults(c, cut_after=0)
        sim.set_stream_faults(d, cut_after=2)
        async with gateway_in_front(stack, {"gateway_header_timeout_s": 1.0}) as gateway:
            await warm_up_gateway(gateway.url, KEY, [("warm", HELLO)], tries=10, timeout=30)
            yield Env(stack, gateway)


async def _stream(env: Env, model: str, request_id: str) -> tuple[Any, Any]:
    asked: dict[str, Any] = {
        "model": model,
        "messages": HELLO,
        "stream": True,
        "stream_options": {"include_usage": True},
        "extra_headers": {"x-switchyard-request-id": request_id},
    }
    raw = await env.client().chat.completions.with_raw_response.create(**asked)
    return raw.headers, raw.parse()


def _text(chunks: list[Any]) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


async def _answer_by_id(env: Env, request_id: str) -> dict[str, Any]:
    url = f"{env.gateway.url}/v1/switchyard/requests/{request_id}"
    async with httpx.AsyncClient() as http:
        for _ in range(60):
            found = await http.get(url, headers={"Authorization": f"Bearer {KEY}"}, timeout=20)
            if found.status_code == 200:
                return dict(found.json())
            await asyncio.sleep(0.25)
    raise AssertionError(f"no answer for {request_id}")


async def _outcomes(env: Env, request_id: str, count: int) -> list[dict[str, Any]]:
    topic = env.stack.topics.outcomes

    def done(records: dict[str, list[dict[str, Any]]]) -> bool:
        mine = [r for r in records[topic] if r.get("request_id") == request_id]
        return len(mine) >= count

    records = await read_topics(env.stack.broker.bootstrap, [topic], done, timeout_s=20)
    mine = [r for r in records[topic] if r.get("request_id") == request_id]
    return sorted(mine, key=lambda r: int(r["attempt"]))


async def test_a_stream_comes_token_by_token_and_is_reassembled_from_the_log(env: Env) -> None:
    rid = f"plain-{uuid.uuid4().hex[:8]}"
    started = time.perf_counter()
    headers, stream = await _stream(env, "plain", rid)
    chunks, first_text_at = [], None
    async for chunk in stream:
        chunks.append(chunk)
        if first_text_at is None and chunk.choices and chunk.choices[0].delta.content:
            first_text_at = time.perf_counter() - started
    ended_at = time.perf_counter() - started
    assert _text(chunks) == PLAIN  # every split UTF-8 character whole
    assert headers["x-switchyard-request-id"] == rid and headers["x-switchyard-attempts"] == "1"
    assert chunks[0].model == headers["x-switchyard-deployment"].split(":", 1)[1]
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    assert sum(bool(c.choices and c.choices[0].delta.content) for c in chunks) > 3
    assert first_text_at is not None and ended_at - first_text_at > 0.2  # not all at the end
    streams, _ = await read_streams(env.stack.broker.bootstrap, env.stack.topics.deltas, 30)
    answer = answer_of(streams, rid)
    assert answer is not None and answer.content == PLAIN and answer.missing == []
    assert (await _answer_by_id(env, rid))["completion"]["choices"][0]["message"][
        "content"
    ] == PLAIN


async def test_a_surrogate_pair_split_across_chunks_arrives_whole(env: Env) -> None:
    _, stream = await _stream(env, "emoji", f"emoji-{uuid.uuid4().hex[:8]}")
    assert _text([chunk async for chunk in stream]) == EMOJI


async def test_a_stream_cut_before_its_first_token_falls_back_invisibly(env: Env) -> None:
    rid = f"cutfirst-{uuid.uuid4().hex[:8]}"
    headers, stream = await _stream(env, "cutfirst", rid)
    chunks = [chunk async for chunk in stream]
    assert _text(chunks) == EMOJI  # the second deployment's answer, and nothing else
    assert headers["x-switchyard-attempts"] == "2"
    assert headers["x-switchyard-deployment"].startswith(env.ids[1])
    first, second = await _outcomes(env, rid, 2)
    assert first["provider"] == env.ids[2] and first["status_class"] == "connection_error"
    assert second["status_class"] == "success" and second["final"]


async def test_a_stream_cut_after_its_first_token_ends_with_an_error_event(env: Env) -> None:
    rid = f"cutlater-{uuid.uuid4().hex[:8]}"
    headers, stream = await _stream(env, "cutlater", rid)
    received = []
    with pytest.raises(openai.APIError) as broken:
        async for chunk in stream:
            received.append(chunk)
    assert broken.value.code == STREAM_INTERRUPTED
    assert headers["x-switchyard-attempts"] == "1"
    seen = _text(received)
    assert seen.startswith("This is a") and len(seen) < 40  # the canned answer's first pieces
    first, *_ = await _outcomes(env, rid, 2)
    assert first["provider"] == env.ids[3] and first["status_class"] == "bad_response"
    # The request goes on in the log: retried, answered, found by id.
    found = await _answer_by_id(env, rid)
    assert found["status"] == "ok" and found["attempts"] == 2
    assert found["completion"]["choices"][0]["message"]["content"] == EMOJI


async def test_a_client_going_away_mid_stream_leaves_the_request_to_complete(env: Env) -> None:
    rid = f"gone-{uuid.uuid4().hex[:8]}"
    _, stream = await _stream(env, "plain", rid)
    got = 0
    async for chunk in stream:
        got += bool(chunk.choices and chunk.choices[0].delta.content)
        if got == 2:
            break
    await stream.close()  # the connection goes, mid-stream
    found = await _answer_by_id(env, rid)
    assert found["status"] == "ok"
    assert found["completion"]["choices"][0]["message"]["content"] == PLAIN
    streams, _ = await read_streams(env.stack.broker.bootstrap, env.stack.topics.deltas, 30)
    answer = answer_of(streams, rid)
    assert answer is not None and answer.content == PLAIN
    async with httpx.AsyncClient() as http:  # and the gateway goes on serving
        ready = await http.get(f"{env.gateway.url}/readyz")
        assert ready.json()["waiting"] == 0


async def test_slow_headers_are_408(env: Env) -> None:
    host, port = env.gateway.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
    await writer.drain()
    started = time.perf_counter()
    answer = await asyncio.wait_for(reader.read(), timeout=10)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 408 ") and b"x-should-retry: false" in answer
    assert 0.8 < time.perf_counter() - started < 5
