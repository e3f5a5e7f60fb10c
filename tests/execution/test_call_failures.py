"""The provider call when transport fails, a 2xx body is bad, or a key is unusable.

Fixtures: conftest.py."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from aiohttp import web
from call_helpers import KEY, MODEL, NOW, ScriptedServer, chat, completion, dispatch, provider
from llmock.scenarios import Delay, Reply
from llmock.testing import LLMockServer

from app.contract import (
    StatusClass,
)
from app.execution.call import CallResult, call_provider
from app.execution.outcome import build_outcome, is_final, reward
from app.routing.reliability import is_retriable

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
