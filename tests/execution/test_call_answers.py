"""The provider call's answers and HTTP errors, through both transports (fixtures: conftest.py)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from call_helpers import KEY, MODEL, NOW, ScriptedServer, chat, completion, dispatch, provider
from llmock.scenarios import Fail
from llmock.testing import LLMockServer

from app.contract import (
    ChatMessage,
    ChatRequest,
    StatusClass,
)
from app.execution.call import CallResult, call_provider, request_body
from app.execution.outcome import build_outcome, cost_usd, is_final
from app.execution.retry_after import parse_retry_after
from app.routing.reliability import is_retriable

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


async def failing(
    client: httpx.AsyncClient, llmock: LLMockServer, status: int, **fail: Any
) -> CallResult:
    """The call's result when LLMock answers HTTP ``status`` (``fail``: more of it)."""
    llmock.state.scenarios.add(Fail(status, **fail))
    return await call_provider(client, provider(llmock.base_url()), MODEL, chat(), 2.0)


async def test_503_is_a_retriable_server_error(
    client: httpx.AsyncClient, llmock: LLMockServer
) -> None:
    result = await failing(client, llmock, 503)

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
    result = await failing(client, llmock, 429, retry_after=1.5)

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
    result = await failing(client, llmock, 400)

    assert result.status_class is StatusClass.CLIENT_ERROR
    assert result.http_status == 400
    assert result.retry_after_s is None
    assert not is_retriable(result.status_class, result.http_status)
    assert is_final(dispatch(attempt=1, max_attempts=3), result)


def test_request_body_passes_stop_and_cache_marks_only_to_a_provider_that_takes_them() -> None:
    mark = {"type": "ephemeral"}
    request = ChatRequest(
        request_id="r",
        messages=[
            ChatMessage(
                role="system", content=[{"type": "text", "text": "be brief", "cache_control": mark}]
            ),
            ChatMessage(role="user", content="hi", cache_control=mark),  # type: ignore[call-arg]
        ],
        tools=[{"type": "function", "function": {"name": "f"}, "cache_control": mark}],
        stop=["END", "STOP"],
    )
    kept = request_body("m", request, cache_control=True)
    assert kept["stop"] == ["END", "STOP"]
    assert kept["messages"][0]["content"][0]["cache_control"] == mark
    assert kept["messages"][1]["cache_control"] == mark
    assert kept["tools"][0]["cache_control"] == mark
    plain = request_body("m", request)
    assert plain["stop"] == ["END", "STOP"]
    assert "cache_control" not in repr(plain)
    assert plain["messages"][0]["content"] == [{"type": "text", "text": "be brief"}]
    assert plain["tools"] == [{"type": "function", "function": {"name": "f"}}]
    assert request.messages[1].model_dump()["cache_control"] == mark  # the request unchanged
