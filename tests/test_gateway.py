"""The gateway driven with the official ``openai`` SDK against the embedded stack.

One stack and one gateway for the module: simulated providers on route ``chat``, and a
small mock provider (tool calls, slow answers, failures) on routes ``tools`` and
``failing``.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import pytest
import yaml
from aiohttp import web
from stack_helpers import LocalServer, stack_and_gateway, wait_ready, warm_up_gateway

from app.embedded.broker import EmbeddedBroker, free_port
from app.embedded.simulated import SimulatedProviders
from app.embedded.simulated.providers_file import providers_config
from app.embedded.stack import EmbeddedStack
from app.gateway.keys import hash_key
from app.gateway.run import RunningGateway, start_gateway

pytestmark = pytest.mark.broker

KEY = "sk-test-admin-" + "a" * 20
KEY_ACME = "sk-test-acme-" + "b" * 20
KEY_TINY = "sk-test-tiny-" + "c" * 20
KEY_TOOLS_ONLY = "sk-test-tools-" + "d" * 20
KEY_METERED = "sk-test-metered-" + "e" * 20
HELLO = [{"role": "user", "content": "hello there"}]
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "the weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


class MockProvider(LocalServer):
    """An OpenAI-compatible provider: a tool call when asked with tools; ``[slow]`` waits
    1.5 s, ``[veryslow]`` 5 s; route ``failing`` (path /broken) always answers 500."""

    def __init__(self) -> None:
        routes = [("/ok/v1/chat/completions", self._chat)]
        super().__init__([*routes, ("/broken/v1/chat/completions", self._broken)])
        self.bodies: list[dict[str, Any]] = []

    async def _chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.bodies.append(body)
        text = json.dumps(body["messages"])
        if "[slow]" in text:
            await asyncio.sleep(1.5)
        if "[veryslow]" in text:
            await asyncio.sleep(5.0)
        message: dict[str, Any] = {"role": "assistant", "content": "plain answer é ✓"}
        finish = "stop"
        if body.get("tools"):
            call = {"id": "call_1", "type": "function"}
            call["function"] = {"name": "get_weather", "arguments": '{"city": "Paris"}'}
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
            finish = "tool_calls"
        usage = {"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12}
        choice = {"index": 0, "message": message, "finish_reason": finish}
        completion = {"id": "cmpl-mock", "object": "chat.completion", "created": 1}
        completion.update(model=body["model"], choices=[choice], usage=usage)
        return web.json_response(completion)

    async def _broken(self, request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"error": {"message": "boom"}}, status=500)


def _providers_yaml(mock: MockProvider) -> Any:
    def make(sim: SimulatedProviders) -> str:
        config = providers_config(sim.base_urls(), sim.models, time_scale=sim.time_scale)
        common = {"max_concurrency": 50, "timeout_ms": 5000}
        config["providers"] += [
            {"id": "mock", "base_url": f"{mock.url}/ok/v1", "models": [{"name": "m1"}], **common},
            {"id": "broken", "base_url": f"{mock.url}/broken/v1", "models": [{"name": "b1"}]},
        ]
        config["routes"]["tools"] = {"providers": ["mock"]}
        config["routes"]["failing"] = {"providers": ["broken"], "max_attempts": 1}
        config["guardrails"] = {"forbidden_keywords": ["forbiddenword"]}
        config["tenants"] = {"tiny": {"rate_limit": {"requests": 1, "window_s": 600}}}
        config["budgets"] = [{"scope": "tenant", "name": "metered", "requests_per_hour": 1}]
        config["gateway_keys"] = [
            {"sha256": hash_key(KEY), "name": "admin"},
            {"sha256": hash_key(KEY_ACME), "tenant": "acme"},
            {"sha256": hash_key(KEY_TINY), "tenant": "tiny"},
            {"sha256": hash_key(KEY_TOOLS_ONLY), "tenant": "acme", "routes": ["tools"]},
            {"sha256": hash_key(KEY_METERED), "tenant": "metered"},
        ]
        return str(yaml.safe_dump(config))

    return make


class Env:
    def __init__(self, stack: EmbeddedStack, gateway: RunningGateway, mock: MockProvider):
        self.stack, self.gateway, self.mock = stack, gateway, mock
        self.base_url = f"{gateway.url}/v1"
        self.sent = 0  # HTTP requests the counting clients made

    def count(self, _request: httpx.Request) -> None:
        self.sent += 1

    def client(self, key: str = KEY, max_retries: int = 0) -> openai.OpenAI:
        hooks = {"request": [self.count]}
        http = httpx.Client(event_hooks=hooks)
        return openai.OpenAI(
            base_url=self.base_url, api_key=key, max_retries=max_retries, http_client=http
        )

    def async_client(self, key: str = KEY) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=self.base_url, api_key=key, max_retries=0)


@pytest.fixture(scope="module")
async def env(broker: EmbeddedBroker) -> AsyncIterator[Env]:
    mock = await MockProvider().start()
    options = {"time_scale": 0.05, "seed": 1, "providers_yaml": _providers_yaml(mock)}
    env = {"SWITCHYARD_REQUEST_DEADLINE_S": "4"}
    gateway_settings = {"gateway_body_timeout_s": 1.0}
    try:
        async with stack_and_gateway(broker, "g", gateway=gateway_settings, env=env, **options) as (
            stack,
            gateway,
        ):
            # Until the worker has joined, requests wait in the log past the 4 s deadline.
            asks = [("chat", HELLO), ("tools", HELLO)]
            await warm_up_gateway(gateway.url, KEY, asks, tries=30, errors=openai.APIStatusError)
            yield Env(stack, gateway, mock)
    finally:
        await mock.stop()


def _run(env: Env, **kwargs: Any) -> Any:
    return asyncio.to_thread(
        env.client().chat.completions.create, **{"model": "chat", "messages": HELLO, **kwargs}
    )


async def test_sync_completion_names_the_deployment(env: Env) -> None:
    def call() -> Any:
        return env.client().chat.completions.with_raw_response.create(
            model="chat", messages=HELLO, max_tokens=20, temperature=0.2, user="u-1"
        )

    raw = await asyncio.to_thread(call)
    completion = raw.parse()
    deployment = raw.headers["x-switchyard-deployment"]
    assert completion.model == deployment.split(":", 1)[1]
    assert completion.choices[0].message.content
    assert raw.headers["x-switchyard-request-id"]
    assert int(raw.headers["x-switchyard-attempts"]) >= 1


async def test_async_completion_and_stream(env: Env) -> None:
    client = env.async_client(KEY_ACME)
    completion = await client.chat.completions.create(model="tools", messages=HELLO)
    assert completion.model == "m1"
    assert completion.choices[0].message.content == "plain answer é ✓"
    stream = await client.chat.completions.create(
        model="tools", messages=HELLO, stream=True, stream_options={"include_usage": True}
    )
    chunks = [chunk async for chunk in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "plain answer é ✓"
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 12
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    await client.close()


async def test_sync_stream_of_tool_calls(env: Env) -> None:
    def call() -> list[Any]:
        stream = env.client().chat.completions.create(
            model="tools", messages=HELLO, tools=[WEATHER_TOOL], stream=True
        )
        return list(stream)

    chunks = await asyncio.to_thread(call)
    calls = [t for c in chunks for t in (c.choices[0].delta.tool_calls or [])]
    assert calls[0].function.name == "get_weather"
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    assert chunks[-1].usage is None  # not asked for


async def test_tools_and_response_format_pass_through(env: Env) -> None:
    completion = await _run(
        env,
        model="tools",
        tools=[WEATHER_TOOL],
        tool_choice="auto",
        response_format={"type": "json_object"},
    )
    call = completion.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    sent = env.mock.bodies[-1]
    assert sent["tools"] == [WEATHER_TOOL] and sent["tool_choice"] == "auto"
    assert sent["response_format"] == {"type": "json_object"}


async def test_models_lists_routes_aliases_and_deployments(env: Env) -> None:
    models = await asyncio.to_thread(lambda: [m.id for m in env.client().models.list()])
    assert {"chat", "tools", "chat:nitro", "chat:floor", "mock:m1"} <= set(models)


async def test_client_errors_map_to_sdk_exceptions(env: Env) -> None:
    with pytest.raises(openai.AuthenticationError):
        await asyncio.to_thread(env.client("sk-wrong").models.list)
    with pytest.raises(openai.NotFoundError) as not_found:
        await _run(env, model="no-such-model")
    assert not_found.value.code == "model_not_found"
    with pytest.raises(openai.PermissionDeniedError):
        await asyncio.to_thread(
            env.client(KEY_TOOLS_ONLY).chat.completions.create, model="chat", messages=HELLO
        )
    with pytest.raises(openai.BadRequestError) as forbidden:
        await _run(env, messages=[{"role": "user", "content": "say forbiddenword now"}])
    assert forbidden.value.code == "forbidden_keyword"
    assert forbidden.value.response.headers["x-should-retry"] == "false"
    with pytest.raises(openai.APIStatusError) as too_large:
        await _run(env, messages=[{"role": "user", "content": "x" * 1_100_000}])
    assert too_large.value.status_code == 413


async def test_tenant_rate_limit_is_not_retried(env: Env) -> None:
    client = env.client(KEY_TINY, max_retries=3)
    first = await asyncio.to_thread(client.chat.completions.create, model="chat", messages=HELLO)
    assert first.choices
    before = env.sent
    with pytest.raises(openai.RateLimitError) as limited:
        await asyncio.to_thread(client.chat.completions.create, model="chat", messages=HELLO)
    assert env.sent - before == 1  # x-should-retry: false: the SDK did not retry
    headers = limited.value.response.headers
    assert headers["x-should-retry"] == "false" and int(headers["retry-after"]) > 0


async def test_a_tenant_request_limit_answers_429_with_retry_after(env: Env) -> None:
    """One request per UTC hour: the second gets a 429 whose Retry-After is the time to
    the next hour, and the SDK may retry it then (no ``x-should-retry: false``)."""
    client = env.client(KEY_METERED)
    first = await asyncio.to_thread(client.chat.completions.create, model="chat", messages=HELLO)
    assert first.choices
    with pytest.raises(openai.RateLimitError) as limited:
        await asyncio.to_thread(client.chat.completions.create, model="chat", messages=HELLO)
    headers = limited.value.response.headers
    assert 0 < int(headers["retry-after"]) <= 3600
    assert "x-should-retry" not in headers
    assert "requests" in limited.value.message


async def test_provider_failure_is_502_and_retried_by_the_sdk(env: Env) -> None:
    client = env.client(max_retries=1)
    before = env.sent
    with pytest.raises(openai.InternalServerError) as failed:
        await asyncio.to_thread(client.chat.completions.create, model="failing", messages=HELLO)
    assert failed.value.status_code == 502
    assert env.sent - before == 2  # a 5xx without x-should-retry: false is retried


async def test_deadline_is_504(env: Env) -> None:
    # The stack's request deadline is 4 s; the mock takes 5 s to answer this one.
    slow = [{"role": "user", "content": "[veryslow] please"}]
    with pytest.raises(openai.InternalServerError) as late:
        await _run(env, model="tools", messages=slow)
    assert late.value.status_code == 504 and late.value.code == "deadline_exceeded"
    headers = late.value.response.headers
    assert headers["x-should-retry"] == "true" and headers["retry-after"] == "1"  # a new try


async def test_body_timeout_is_408(env: Env) -> None:
    host, port = env.gateway.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {KEY}\r\nContent-Length: 500\r\n\r\n"
    )
    writer.write(head.encode() + b'{"model": "chat"')
    await writer.drain()
    status = await asyncio.wait_for(reader.readline(), timeout=10)
    writer.close()
    assert b" 408 " in status


async def test_busy_gateway_answers_429_at_once(env: Env) -> None:
    settings = env.stack.gateway_settings().model_copy(
        update={"gateway_max_waiting": 1, "gateway_reply_partitions": [1]}
    )
    second = await start_gateway(settings)
    try:
        client = openai.AsyncOpenAI(base_url=f"{second.url}/v1", api_key=KEY, max_retries=0)
        slow = [{"role": "user", "content": "[slow] please"}]
        waiting = asyncio.create_task(client.chat.completions.create(model="tools", messages=slow))
        await asyncio.sleep(0.5)
        with pytest.raises(openai.RateLimitError) as busy:
            await client.chat.completions.create(model="tools", messages=HELLO)
        assert busy.value.code == "gateway_busy"
        assert "x-should-retry" not in busy.value.response.headers  # retrying may help
        assert (await waiting).choices  # the second gateway's own partition answered it
        await client.close()
    finally:
        await second.stop()


async def test_answer_survives_a_killed_gateway_and_is_found_by_id(env: Env) -> None:
    port = free_port()
    process_env = env.stack.worker_env(99)
    process_env.update(SWITCHYARD_GATEWAY_PORT=str(port), SWITCHYARD_GATEWAY_REPLY_PARTITIONS="[2]")
    doomed = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "gateway"],
        env=process_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        await wait_ready(url, tries=100)
        request_id = f"survive-{uuid.uuid4().hex[:8]}"
        client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=KEY_ACME, max_retries=0)
        slow = [{"role": "user", "content": "[slow] survive"}]
        headers = {"x-switchyard-request-id": request_id}
        call = asyncio.create_task(
            client.chat.completions.create(model="tools", messages=slow, extra_headers=headers)
        )
        await asyncio.sleep(0.7)
        doomed.kill()  # SIGKILL mid-request
        with pytest.raises(openai.APIConnectionError):
            await call
        await client.close()
    finally:
        doomed.kill()
        doomed.wait()
    await _found_by_id(env, request_id)


async def _found_by_id(env: Env, request_id: str) -> None:
    url = f"{env.gateway.url}/v1/switchyard/requests/{request_id}"
    auth = {"Authorization": f"Bearer {KEY_ACME}"}
    async with httpx.AsyncClient() as http:
        for _ in range(40):
            found = await http.get(url, headers=auth, timeout=20)
            if found.status_code == 200:
                break
            await asyncio.sleep(0.25)
        assert found.status_code == 200, found.text
        body = found.json()
        assert body["id"] == f"acme.{request_id}" and body["status"] == "ok"
        assert body["completion"]["choices"][0]["message"]["content"] == "plain answer é ✓"
        other = await http.get(url, headers={"Authorization": f"Bearer {KEY}"}, timeout=20)
        assert other.status_code == 404  # another tenant's id space


async def test_health_and_readiness(env: Env) -> None:
    async with httpx.AsyncClient() as http:
        assert (await http.get(f"{env.gateway.url}/healthz")).status_code == 200
        ready = await http.get(f"{env.gateway.url}/readyz")
        assert ready.status_code == 200 and ready.json()["status"] == "ready"
