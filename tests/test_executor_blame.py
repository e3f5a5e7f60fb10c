"""Blame for time: running out of the request's time is ``expired``, not the
provider's ``timeout``.

``expired``: the deadline had passed before the call, or the call was cut short by
it (less time left than the provider's timeout, all of it used). ``timeout``: the
provider's own timeout ran out, or it answered 408. Both for plain and streamed
calls. No network: httpx's mock transport plays a slow provider.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import httpx
import pytest
from factories import accepted_request, decision_for, dispatch_for

import agents.executor as executor
from app.config.providers import ModelSpec, ProviderConfig
from app.contract import ChatMessage, ChatRequest, Dispatch, StatusClass

NOW = datetime(2025, 1, 1, tzinfo=UTC)
calls: list[httpx.Request] = []


async def slow(request: httpx.Request) -> httpx.Response:
    calls.append(request)
    if request.url.path.endswith("/408/chat/completions"):
        return httpx.Response(408, json={"error": {"code": "timeout"}})
    await asyncio.sleep(5.0)
    return httpx.Response(200, json={"choices": [{"message": {"content": "late"}}]})


@pytest.fixture(autouse=True)
async def slow_provider(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[None]:
    calls.clear()
    client = httpx.AsyncClient(transport=httpx.MockTransport(slow))
    monkeypatch.setattr(executor, "_client", client)
    yield
    await client.aclose()


def provider(stream: bool = False, path: str = "", ttft_ms: int | None = None) -> ProviderConfig:
    return ProviderConfig(
        id="openai-x",
        base_url=f"http://provider.test/v1{path}",
        stream=stream,
        ttft_timeout_ms=ttft_ms,
        models=[ModelSpec(name="m")],
    )


def dispatch(*, timeout_s: float, deadline_in_s: float) -> Dispatch:
    request = ChatRequest(request_id="b1", messages=[ChatMessage(role="user", content="hi")])
    accepted = accepted_request(request, NOW, prompt_chars=2, offset=1)
    decision = decision_for("b1", "openai-x:m", NOW, state_version=1, prompt_chars=2)
    deadline = time.time() + deadline_in_s
    return dispatch_for(accepted, decision, NOW, timeout_s=timeout_s, deadline=deadline)


@pytest.mark.parametrize("stream", [False, True])
async def test_a_deadline_already_passed_is_expired_without_a_call(stream: bool) -> None:
    result = await executor._call_in_time(
        dispatch(timeout_s=5.0, deadline_in_s=-1.0), provider(stream)
    )
    assert result.status_class is StatusClass.EXPIRED
    assert calls == []


@pytest.mark.parametrize("stream", [False, True])
async def test_a_call_cut_short_by_the_deadline_is_expired(stream: bool) -> None:
    result = await executor._call_in_time(
        dispatch(timeout_s=5.0, deadline_in_s=0.3), provider(stream)
    )
    assert result.status_class is StatusClass.EXPIRED
    assert result.error == "request deadline passed during the call"
    assert len(calls) == 1


@pytest.mark.parametrize("stream", [False, True])
async def test_the_provider_s_own_timeout_is_a_timeout(stream: bool) -> None:
    result = await executor._call_in_time(
        dispatch(timeout_s=0.3, deadline_in_s=60.0), provider(stream)
    )
    assert result.status_class is StatusClass.TIMEOUT


@pytest.mark.parametrize("stream", [False, True])
async def test_a_408_within_a_cut_budget_is_still_the_provider_s_timeout(stream: bool) -> None:
    result = await executor._call_in_time(
        dispatch(timeout_s=5.0, deadline_in_s=1.0), provider(stream, path="/408")
    )
    assert result.status_class is StatusClass.TIMEOUT
    assert result.http_status == 408


@pytest.mark.parametrize("stream", [False, True])
async def test_a_first_token_limit_within_a_cut_budget_is_the_provider_s_timeout(
    stream: bool,
) -> None:
    """The deadline cut the budget to 2 s, but the provider's 0.2 s first-token limit
    ended the call: the provider's doing."""
    result = await executor._call_in_time(
        dispatch(timeout_s=5.0, deadline_in_s=2.0), provider(stream, ttft_ms=200)
    )
    assert result.status_class is StatusClass.TIMEOUT
    assert result.error == "ttft_timeout after 0.2s"


@pytest.mark.parametrize("stream", [False, True])
async def test_a_deadline_before_the_first_token_limit_is_expired(stream: bool) -> None:
    result = await executor._call_in_time(
        dispatch(timeout_s=5.0, deadline_in_s=0.3), provider(stream, ttft_ms=1000)
    )
    assert result.status_class is StatusClass.EXPIRED
