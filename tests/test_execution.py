"""The executor's provider call, against real servers on 127.0.0.1.

LLMock plays the provider for the standard cases (completions, scripted HTTP
errors, delays). A small aiohttp server of our own covers what LLMock cannot
produce: malformed 2xx bodies, cached-token usage shapes, an HTTP-date
Retry-After, a body that trickles in, and a look at the request headers. A raw
asyncio server hangs up without answering. Every network test runs through
both transports.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from aiohttp import web
from llmock.scenarios import Delay, Fail, Reply
from llmock.testing import LLMockServer
from pydantic import SecretStr

from app.config import ModelSpec, ProviderConfig
from app.events import (
    ChatMessage,
    ChatRequest,
    Decision,
    Dispatch,
    LogPosition,
    RequestAccepted,
    StatusClass,
    derived_id,
)
from app.execution.call import CallResult, call_provider, request_body
from app.execution.http import Transport, make_client
from app.execution.outcome import build_outcome, cost_usd, is_final, reward
from app.execution.retry_after import parse_retry_after
from app.routing.reliability import is_retriable

KEY = "fake-test-9f3c1d7e-SECRET"
MODEL = "gpt-4o-mini"
NOW = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


# --------------------------------------------------------------------------- servers


@pytest.fixture(scope="module")
def llmock() -> Iterator[LLMockServer]:
    with LLMockServer() as server:
        yield server


@pytest.fixture(autouse=True)
def _reset_llmock(request: pytest.FixtureRequest) -> None:
    if "llmock" in request.fixturenames:
        request.getfixturevalue("llmock").state.reset()


@dataclass
class ScriptedServer:
    """Answers ``POST /v1/chat/completions`` with whatever ``handler`` the test sets."""

    url: str
    handler: Handler | None = None
    seen: list[tuple[dict[str, str], dict[str, Any]]] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    def reply_json(
        self, body: object, status: int = 200, headers: dict[str, str] | None = None
    ) -> None:
        async def handler(_: web.Request) -> web.StreamResponse:
            return web.json_response(body, status=status, headers=headers)

        self.handler = handler

    def reply_raw(self, body: bytes, status: int = 200) -> None:
        async def handler(_: web.Request) -> web.StreamResponse:
            return web.Response(body=body, status=status, content_type="application/json")

        self.handler = handler


@pytest.fixture(scope="module")
async def scripted_server() -> AsyncIterator[ScriptedServer]:
    server = ScriptedServer(url="")

    async def dispatch(request: web.Request) -> web.StreamResponse:
        server.seen.append((dict(request.headers), await request.json()))
        assert server.handler is not None, "test did not script a reply"
        return await server.handler(request)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", dispatch)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    yield server
    await runner.cleanup()


@pytest.fixture
def scripted(scripted_server: ScriptedServer) -> ScriptedServer:
    scripted_server.handler = None
    scripted_server.seen.clear()
    return scripted_server


@pytest.fixture(scope="module")
async def hang_up_url() -> AsyncIterator[str]:
    """A server that reads the request and closes the connection without a word."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(65536)
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
    server.close()
    await server.wait_closed()


@pytest.fixture
def closed_port_url() -> str:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # bound then closed, never listening: connections are refused
    return f"http://127.0.0.1:{port}/v1"


@pytest.fixture(params=["aiohttp", "httpx"])
async def client(request: pytest.FixtureRequest) -> AsyncIterator[httpx.AsyncClient]:
    transport: Transport = request.param
    async with make_client(transport=transport, max_connections=16) as http_client:
        yield http_client


# --------------------------------------------------------------------------- helpers


def provider(base_url: str, key: str = KEY, **prices: float) -> ProviderConfig:
    return ProviderConfig(
        id="openai-test",
        base_url=base_url,
        api_key=SecretStr(key),
        cost_per_mtok_input=prices.get("input", 2.0),
        cost_per_mtok_output=prices.get("output", 8.0),
        cost_per_mtok_cached_input=prices.get("cached", 0.5),
        models=[ModelSpec(name=MODEL)],
    )


def chat(**extra: Any) -> ChatRequest:
    return ChatRequest(
        request_id="req-1",
        messages=[
            ChatMessage(role="system", content="Be brief."),
            ChatMessage(role="user", content="What is the capital of France?"),
        ],
        **extra,
    )


def dispatch(attempt: int = 1, max_attempts: int = 3) -> Dispatch:
    request = chat()
    accepted = RequestAccepted(
        id=derived_id("accepted", "req-1"),
        occurred_at=NOW,
        request=request,
        route="chat",
        prompt_sha256="0" * 64,
        prompt_chars=42,
        source=LogPosition(topic="llm.requests", partition=0, offset=7),
    )
    decision = Decision(
        id=derived_id("decision", "req-1", attempt),
        occurred_at=NOW,
        request_id="req-1",
        attempt=attempt,
        route="chat",
        deployment=f"openai-test:{MODEL}",
        provider="openai-test",
        model=MODEL,
        strategy="ucb1",
        algorithm_version="1",
        candidates=[],
        excluded=[],
        config_hash="abc",
        state_version=7,
        propensity=1.0,
        prompt_sha256="0" * 64,
        prompt_chars=42,
    )
    return Dispatch(
        id=derived_id("dispatch", "req-1", attempt),
        occurred_at=NOW,
        decision=decision,
        accepted=accepted,
        timeout_s=2.0,
        max_attempts=max_attempts,
        deadline=NOW.timestamp() + 60.0,
    )


def completion(finish_reason: object = "stop", **usage: object) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Paris."},
                "finish_reason": finish_reason,
            }
        ],
        "usage": usage,
    }


# --------------------------------------------------------------------------- success


async def test_success_against_llmock(client: httpx.AsyncClient, llmock: LLMockServer) -> None:
    result = await call_provider(
        client, provider(llmock.base_url()), MODEL, chat(max_tokens=50, temperature=0.2), 2.0
    )

    assert result.status_class is StatusClass.SUCCESS
    assert result.http_status == 200
    assert result.error is None and result.retry_after_s is None
    assert result.completion is not None
    usage = result.completion["usage"]
    assert result.tokens_in == usage["prompt_tokens"] > 0
    assert result.tokens_out == usage["completion_tokens"] > 0
    assert result.tokens_cached == 0
    assert result.finish_reason == "stop"
    assert isinstance(result.completion["choices"][0]["message"]["content"], str)
    assert 0.0 < result.latency_ms < 2000.0

    [record] = llmock.state.journal.records()
    assert record.path == "/v1/chat/completions"
    assert record.body == {
        "model": MODEL,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What is the capital of France?"},
        ],
        "max_tokens": 50,
        "temperature": 0.2,
    }


@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens_details": {"cached_tokens": 400}},
        {"cached_tokens": 400},
        {"cache_read_input_tokens": 400},
    ],
    ids=["openai", "flat", "anthropic"],
)
async def test_cached_tokens_and_cost(
    client: httpx.AsyncClient, scripted: ScriptedServer, usage: dict[str, Any]
) -> None:
    scripted.reply_json(completion(prompt_tokens=1000, completion_tokens=200, **usage))
    config = provider(scripted.base_url, input=2.0, output=8.0, cached=0.5)

    result = await call_provider(client, config, MODEL, chat(), 2.0)

    assert result.status_class is StatusClass.SUCCESS
    assert (result.tokens_in, result.tokens_out, result.tokens_cached) == (1000, 200, 400)
    # 600 uncached at $2, 400 cached at $0.5, 200 out at $8, per 1M tokens.
    expected = (600 * 2.0 + 400 * 0.5 + 200 * 8.0) / 1e6
    assert cost_usd(config, 1000, 200, 400) == pytest.approx(expected)
    outcome = build_outcome(dispatch(), result, config, occurred_at=NOW, final=True)
    assert outcome.cost_usd == pytest.approx(0.003)
    assert outcome.tokens_cached == 400
    assert outcome.reward == 1.0


async def test_request_headers(client: httpx.AsyncClient, scripted: ScriptedServer) -> None:
    scripted.reply_json(completion(prompt_tokens=1, completion_tokens=1))

    await call_provider(client, provider(scripted.base_url), MODEL, chat(), 2.0)
    await call_provider(client, provider(scripted.base_url, key=""), MODEL, chat(), 2.0)

    (with_key, body), (without_key, _) = scripted.seen
    assert with_key["Authorization"] == f"Bearer {KEY}"
    assert "Authorization" not in without_key
    assert body["model"] == MODEL
    assert "max_tokens" not in body and "temperature" not in body


def test_request_body_drops_none() -> None:
    request = ChatRequest(
        request_id="r",
        messages=[
            ChatMessage(role="assistant", content=None, tool_calls=[{"id": "t1"}]),  # type: ignore[call-arg]
            ChatMessage(role="user", content="hi"),
        ],
    )
    assert request_body("m", request) == {
        "model": "m",
        "messages": [
            {"role": "assistant", "tool_calls": [{"id": "t1"}]},
            {"role": "user", "content": "hi"},
        ],
    }


def test_cost_never_bills_negative_input() -> None:
    config = provider("http://x", input=2.0, output=8.0, cached=0.5)
    assert cost_usd(config, 100, 0, 300) == pytest.approx(300 * 0.5 / 1e6)
    assert cost_usd(config, 0, 0, 0) == 0.0


# --------------------------------------------------------------------------- HTTP errors


async def test_503_is_a_retriable_server_error(
    client: httpx.AsyncClient, llmock: LLMockServer
) -> None:
    llmock.state.scenarios.add(Fail(503))

    result = await call_provider(client, provider(llmock.base_url()), MODEL, chat(), 2.0)

    assert result.status_class is StatusClass.SERVER_ERROR
    assert result.http_status == 503
    assert result.error == "HTTP 503 (service_unavailable)"
    assert result.completion is None
    assert is_retriable(result.status_class, result.http_status)
    assert not is_final(dispatch(attempt=1, max_attempts=3), result)
    assert is_final(dispatch(attempt=3, max_attempts=3), result)


async def test_429_is_rate_limited_with_retry_after(
    client: httpx.AsyncClient, llmock: LLMockServer
) -> None:
    llmock.state.scenarios.add(Fail(429, retry_after=1.5))

    result = await call_provider(client, provider(llmock.base_url()), MODEL, chat(), 2.0)

    assert result.status_class is StatusClass.RATE_LIMITED
    assert result.http_status == 429
    assert result.retry_after_s == 1.5  # retry-after-ms: 1500 beats retry-after: 2
    assert result.error == "HTTP 429 (rate_limit_exceeded)"
    assert is_retriable(result.status_class, result.http_status)


async def test_retry_after_http_date(client: httpx.AsyncClient, scripted: ScriptedServer) -> None:
    scripted.reply_json(
        {"error": {"message": "slow down"}},
        status=429,
        headers={
            "Date": "Wed, 21 Oct 2015 07:28:00 GMT",
            "Retry-After": "Wed, 21 Oct 2015 07:28:30 GMT",
        },
    )

    result = await call_provider(client, provider(scripted.base_url), MODEL, chat(), 2.0)

    assert result.status_class is StatusClass.RATE_LIMITED
    assert result.retry_after_s == 30.0
    assert result.error == "HTTP 429"


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "7"}, 7.0),
        ({"retry-after": " 2.5 "}, 2.5),
        ({"retry-after-ms": "250", "retry-after": "1"}, 0.25),
        ({"retry-after-ms": "soon", "retry-after": "3"}, 3.0),
        ({"retry-after": "-1"}, None),
        ({"retry-after": "nan"}, None),
        ({"retry-after": "whenever"}, None),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:30 GMT"}, None),  # no Date to measure from
        (
            {
                "retry-after": "Wed, 21 Oct 2015 07:27:00 GMT",
                "date": "Wed, 21 Oct 2015 07:28:00 GMT",
            },
            0.0,
        ),
        ({}, None),
    ],
)
def test_parse_retry_after(headers: dict[str, str], expected: float | None) -> None:
    assert parse_retry_after(httpx.Headers(headers)) == expected


async def test_400_is_a_client_error_not_retried(
    client: httpx.AsyncClient, llmock: LLMockServer
) -> None:
    llmock.state.scenarios.add(Fail(400))

    result = await call_provider(client, provider(llmock.base_url()), MODEL, chat(), 2.0)

    assert result.status_class is StatusClass.CLIENT_ERROR
    assert result.http_status == 400
    assert result.retry_after_s is None
    assert not is_retriable(result.status_class, result.http_status)
    assert is_final(dispatch(attempt=1, max_attempts=3), result)


# --------------------------------------------------------------------------- transport failures


async def test_slow_server_times_out(client: httpx.AsyncClient, llmock: LLMockServer) -> None:
    llmock.state.scenarios.add(Delay(seconds=1.0))

    result = await call_provider(client, provider(llmock.base_url()), MODEL, chat(), 0.2)

    assert result.status_class is StatusClass.TIMEOUT
    assert result.http_status is None
    assert result.error == "timeout after 0.2s"
    assert 150.0 <= result.latency_ms < 900.0
    assert not is_final(dispatch(attempt=1, max_attempts=2), result)


async def test_timeout_bounds_the_whole_call(
    client: httpx.AsyncClient, scripted: ScriptedServer
) -> None:
    """A body that trickles in never trips a per-read timeout; the call's deadline still holds."""

    async def trickle(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        try:
            for _ in range(20):
                await response.write(b" ")
                await asyncio.sleep(0.05)
            await response.write(json.dumps(completion()).encode())
        except ConnectionError:
            pass  # the client gave up, as it should
        return response

    scripted.handler = trickle

    result = await call_provider(client, provider(scripted.base_url), MODEL, chat(), 0.3)

    assert result.status_class is StatusClass.TIMEOUT
    assert 250.0 <= result.latency_ms < 900.0


async def test_refused_connection(client: httpx.AsyncClient, closed_port_url: str) -> None:
    result = await call_provider(client, provider(closed_port_url), MODEL, chat(), 2.0)

    assert result.status_class is StatusClass.CONNECTION_ERROR
    assert result.http_status is None
    assert result.error == "ConnectError"
    assert is_retriable(result.status_class, result.http_status)


async def test_server_hangs_up(client: httpx.AsyncClient, hang_up_url: str) -> None:
    result = await call_provider(client, provider(hang_up_url), MODEL, chat(), 2.0)

    assert result.status_class is StatusClass.CONNECTION_ERROR
    assert result.error == "RemoteProtocolError"


# --------------------------------------------------------------------------- bad 2xx bodies


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b'{"choices": [{"message": ', "malformed JSON body"),
        (b"<html>502 Bad Gateway</html>", "malformed JSON body"),
        (b"\xff\xfe not utf-8", "malformed JSON body"),
        (b"[]", "malformed JSON body"),
        (b"", "malformed JSON body"),
        (b'{"id": "x"}', "missing choices"),
        (b'{"choices": []}', "missing choices"),
        (b'{"choices": [{"finish_reason": "stop"}]}', "missing choices[0].message"),
        (b'{"choices": [{"message": {}, "finish_reason": 3}]}', "invalid finish_reason"),
    ],
)
async def test_malformed_2xx_is_a_bad_response(
    client: httpx.AsyncClient, scripted: ScriptedServer, body: bytes, error: str
) -> None:
    scripted.reply_raw(body)

    result = await call_provider(client, provider(scripted.base_url), MODEL, chat(), 2.0)

    assert result.status_class is StatusClass.BAD_RESPONSE
    assert result.http_status == 200
    assert result.error == error
    assert result.completion is None
    assert is_retriable(result.status_class, result.http_status)
    assert reward(result.status_class) == 0.0


async def test_error_finish_reason_is_a_bad_response(
    client: httpx.AsyncClient, llmock: LLMockServer
) -> None:
    llmock.state.scenarios.add(Reply(text="partial", finish_reason="error"))

    result = await call_provider(client, provider(llmock.base_url()), MODEL, chat(), 2.0)

    assert result.status_class is StatusClass.BAD_RESPONSE
    assert result.http_status == 200
    assert result.finish_reason == "error"
    assert result.error == "finish_reason error"
    assert result.completion is None
    assert result.tokens_in > 0  # billed all the same


# --------------------------------------------------------------------------- secrets


async def test_api_key_never_leaks(
    client: httpx.AsyncClient, scripted: ScriptedServer, closed_port_url: str
) -> None:
    """Providers that echo the key in their error body or code do not get it published."""
    echoes = [
        (401, {"error": {"message": f"Incorrect API key provided: {KEY}", "code": KEY}}),
        (500, {"error": {"message": f"Bearer {KEY}", "type": f"key_{KEY}"}}),
        (200, completion(finish_reason=KEY)),
        (200, {"choices": [{"message": {}, "finish_reason": "error"}], "note": KEY}),
    ]
    results: list[CallResult] = []
    for status, body in echoes:
        scripted.reply_json(body, status=status)
        results.append(await call_provider(client, provider(scripted.base_url), MODEL, chat(), 2.0))
    # The key in the URL's credentials must not come back either.
    leaky_url = closed_port_url.replace("http://", f"http://user:{KEY}@")
    results.append(await call_provider(client, provider(leaky_url), MODEL, chat(), 2.0))

    assert [r.status_class for r in results] == [
        StatusClass.AUTH_ERROR,
        StatusClass.SERVER_ERROR,
        StatusClass.SUCCESS,
        StatusClass.BAD_RESPONSE,
        StatusClass.CONNECTION_ERROR,
    ]
    assert results[0].error == "HTTP 401 ([redacted])"
    for result in results:
        config = provider(scripted.base_url)
        outcome = build_outcome(dispatch(), result, config, occurred_at=NOW, final=True)
        assert KEY not in (result.error or "")
        assert KEY not in outcome.model_dump_json()
        assert KEY not in repr(config)


async def test_unusable_key_is_an_auth_error(
    client: httpx.AsyncClient, scripted: ScriptedServer
) -> None:
    result = await call_provider(
        client, provider(scripted.base_url, key="sk\nx"), MODEL, chat(), 2.0
    )

    assert result.status_class is StatusClass.AUTH_ERROR
    assert result.http_status is None
    assert scripted.seen == []


# --------------------------------------------------------------------------- outcome


def test_build_outcome_fields() -> None:
    config = provider("http://x", input=1.0, output=2.0, cached=0.0)
    result = CallResult(
        StatusClass.SERVER_ERROR, 502, 123.4, tokens_in=10, tokens_out=5, error="HTTP 502"
    )
    sent = dispatch(attempt=2, max_attempts=3)

    outcome = build_outcome(sent, result, config, occurred_at=NOW, final=is_final(sent, result))

    assert outcome.id == derived_id("outcome", "req-1", 2)
    assert outcome.decision_id == sent.decision.id
    assert (outcome.request_id, outcome.attempt, outcome.route) == ("req-1", 2, "chat")
    assert (outcome.deployment, outcome.provider, outcome.model) == (
        f"openai-test:{MODEL}",
        "openai-test",
        MODEL,
    )
    assert (outcome.status_class, outcome.http_status, outcome.latency_ms) == (
        StatusClass.SERVER_ERROR,
        502,
        123.4,
    )
    assert outcome.cost_usd == pytest.approx((10 * 1.0 + 5 * 2.0) / 1e6)
    assert outcome.reward == 0.0
    assert outcome.retriable is True
    assert outcome.final is False
    assert outcome.error == "HTTP 502"
    assert outcome.occurred_at == NOW


def test_build_outcome_rejects_another_provider() -> None:
    other = provider("http://x").model_copy(update={"id": "groq-test"})
    with pytest.raises(ValueError, match="not the decision's"):
        build_outcome(
            dispatch(),
            CallResult(StatusClass.SUCCESS, 200, 1.0),
            other,
            occurred_at=NOW,
            final=True,
        )


@pytest.mark.parametrize(
    ("status_class", "http_status", "attempt", "final"),
    [
        (StatusClass.SUCCESS, 200, 1, True),
        (StatusClass.TIMEOUT, None, 1, False),
        (StatusClass.TIMEOUT, None, 3, True),
        (StatusClass.SERVER_ERROR, 501, 1, True),  # not in seed 004's retriable set
        (StatusClass.AUTH_ERROR, 401, 1, True),
        (StatusClass.RATE_LIMITED, 429, 2, False),
    ],
)
def test_is_final(
    status_class: StatusClass, http_status: int | None, attempt: int, final: bool
) -> None:
    result = CallResult(status_class, http_status, 1.0)
    assert is_final(dispatch(attempt=attempt, max_attempts=3), result) is final


def test_reward() -> None:
    assert [reward(s) for s in StatusClass] == [
        1.0 if s is StatusClass.SUCCESS else 0.0 for s in StatusClass
    ]
    assert reward(StatusClass.SUCCESS) == 1.0


def test_unknown_transport() -> None:
    with pytest.raises(ValueError, match="unknown transport"):
        make_client(transport="curl")  # type: ignore[arg-type]
