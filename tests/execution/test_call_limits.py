"""A provider call's time limits and a stream's faults, against a scripted provider.

The first token (``ttft_timeout_ms``: a stream's first piece of answer, a plain call's
response headers), the gap between chunks once the answer has begun
(``stream_idle_timeout_ms``), and the streams that end badly: cut, malformed, or
complete without ``[DONE]``. Each limit ends the attempt as a ``timeout`` naming it,
a provider failure the router takes elsewhere; the limits are hundreds of
milliseconds and the provider's delays seconds. Fixtures: conftest.py.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from aiohttp import web
from call_helpers import (
    MODEL,
    ScriptedServer,
    chat,
    completion,
    dispatch,
    hold,
    provider,
    script,
)

from app.config.providers import ProviderConfig
from app.contract import StatusClass
from app.execution.call import call_provider
from app.execution.outcome import is_final, retriable
from app.execution.stream import stream_provider

USAGE = {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}


def limited(base_url: str, **fields: Any) -> ProviderConfig:
    """The test provider with time limits (validated: an unknown field is an error)."""
    return ProviderConfig.model_validate({**provider(base_url).model_dump(), **fields})


def event(body: object) -> bytes:
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def piece(text: str = "", finish_reason: str | None = None, **delta: object) -> bytes:
    if text:
        delta["content"] = text
    choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
    return event({"id": "chatcmpl-1", "model": MODEL, "choices": [choice]})


ROLE = piece(role="assistant", content="")  # OpenAI's first chunk: no answer yet
USAGE_EVENT = event({"id": "chatcmpl-1", "choices": [], "usage": USAGE})
DONE = b"data: [DONE]\n\n"


class Pieces:
    """A delta sink that keeps what it was handed."""

    def __init__(self) -> None:
        self.text: list[str] = []

    def piece(self, content: str, tool_calls: object, refusal: object) -> None:
        self.text.append(content)


async def stream(
    client: httpx.AsyncClient, server: ScriptedServer, sink: Pieces | None = None, **fields: Any
) -> Any:
    config = limited(server.base_url, stream=True, **fields)
    return await stream_provider(client, config, MODEL, chat(), 3.0, sink)


# --------------------------------------------------------------------------- first token


async def test_a_first_token_later_than_the_ttft_limit_is_a_timeout(
    client: httpx.AsyncClient, scripted: ScriptedServer
) -> None:
    script(scripted, ROLE, 2.0, piece("Paris."), piece(finish_reason="stop"), USAGE_EVENT, DONE)

    result = await stream(client, scripted, ttft_timeout_ms=200)

    assert result.status_class is StatusClass.TIMEOUT
    assert result.error == "ttft_timeout after 0.2s"
    assert result.http_status is None and result.completion is None
    assert 150.0 <= result.latency_ms < 1500.0  # not the 2 s the token took
    assert retriable(result) and not is_final(dispatch(attempt=1, max_attempts=2), result)


async def test_reasoning_counts_as_the_first_token(
    client: httpx.AsyncClient, scripted: ScriptedServer
) -> None:
    thinking = [piece(reasoning_content="hm"), 0.1] * 4  # 0.4 s of reasoning, then the answer
    script(scripted, ROLE, *thinking, piece("Paris.", "stop"), USAGE_EVENT, DONE)

    result = await stream(client, scripted, ttft_timeout_ms=250)

    assert result.status_class is StatusClass.SUCCESS, result.error


async def test_headers_later_than_the_ttft_limit_time_a_plain_call_out(
    client: httpx.AsyncClient, scripted: ScriptedServer
) -> None:
    async def late(request: web.Request) -> web.StreamResponse:
        await hold(request, 2.0)
        return web.json_response(completion())

    scripted.handler = late
    config = limited(scripted.base_url, ttft_timeout_ms=200)

    result = await call_provider(client, config, MODEL, chat(), 3.0)

    assert result.status_class is StatusClass.TIMEOUT
    assert result.error == "ttft_timeout after 0.2s"
    assert result.latency_ms < 1500.0


async def test_the_ttft_limit_ends_at_a_plain_call_s_headers(
    client: httpx.AsyncClient, scripted: ScriptedServer
) -> None:
    """A body that takes longer than the limit after prompt headers is still an answer."""

    body = json.dumps(completion(prompt_tokens=5)).encode()
    script(scripted, b" ", 0.5, body, content_type="application/json")
    config = limited(scripted.base_url, ttft_timeout_ms=200)

    result = await call_provider(client, config, MODEL, chat(), 3.0)

    assert result.status_class is StatusClass.SUCCESS, result.error
    assert result.tokens_in == 5


# --------------------------------------------------------------------------- mid-stream


async def test_a_stream_stalled_mid_answer_ends_at_the_idle_limit(
    client: httpx.AsyncClient, scripted: ScriptedServer
) -> None:
    script(scripted, ROLE, piece("Par"), 2.0, piece("is."), piece(finish_reason="stop"), DONE)
    sink = Pieces()

    result = await stream(client, scripted, sink, stream_idle_timeout_ms=200)

    assert result.status_class is StatusClass.TIMEOUT
    assert result.error == "stream_idle after 0.2s"
    assert result.completion is None and result.first_token_ms is not None
    assert result.latency_ms < 1500.0
    assert sink.text == ["Par"]  # what the requester saw before the stall
    assert retriable(result) and not is_final(dispatch(attempt=1, max_attempts=2), result)


async def test_steady_chunks_are_never_idle(
    client: httpx.AsyncClient, scripted: ScriptedServer
) -> None:
    steady = [piece("a"), 0.1] * 6  # 0.6 s in all, never 0.5 s without a chunk
    script(scripted, ROLE, *steady, piece(finish_reason="stop"), USAGE_EVENT, DONE)

    result = await stream(client, scripted, stream_idle_timeout_ms=500)

    assert result.status_class is StatusClass.SUCCESS, result.error
    assert result.completion is not None
    assert result.completion["choices"][0]["message"]["content"] == "a" * 6


async def test_a_stream_cut_mid_answer_is_a_bad_response(
    client: httpx.AsyncClient, scripted: ScriptedServer
) -> None:
    script(scripted, ROLE, piece("Par"), close=True)

    result = await stream(client, scripted)

    assert result.status_class is StatusClass.BAD_RESPONSE
    assert result.error is not None and result.error.startswith("stream broken: ")
    assert retriable(result) and result.completion is None


@pytest.mark.parametrize(
    ("ending", "error"),
    [
        pytest.param([], "stream ended without a finish reason", id="no-finish-reason"),
        pytest.param(
            [b'data: {"choices": [{"delta": {"content": "is\n\n'],
            "malformed stream chunk",
            id="malformed-chunk",
        ),
    ],
)
async def test_a_stream_without_a_finish_reason_or_with_a_malformed_chunk_is_a_bad_response(
    client: httpx.AsyncClient, scripted: ScriptedServer, ending: list[bytes], error: str
) -> None:
    script(scripted, ROLE, piece("Par"), *ending)

    result = await stream(client, scripted)

    assert result.status_class is StatusClass.BAD_RESPONSE
    assert result.error == error


# --------------------------------------------------------------------------- no [DONE]


async def test_a_complete_stream_without_done_is_an_answer_with_its_usage(
    client: httpx.AsyncClient, scripted: ScriptedServer
) -> None:
    script(scripted, ROLE, piece("Paris."), piece(finish_reason="stop"), USAGE_EVENT)

    result = await stream(client, scripted)

    assert result.status_class is StatusClass.SUCCESS, result.error
    assert (result.tokens_in, result.tokens_out) == (12, 3)
    assert result.completion is not None and result.completion["usage"] == USAGE


async def test_a_complete_stream_held_open_without_done_is_answered_at_once(
    client: httpx.AsyncClient, scripted: ScriptedServer
) -> None:
    """Finish reason and usage are all a stream has to say: no wait for ``[DONE]``."""
    script(scripted, ROLE, piece("Paris."), piece(finish_reason="stop"), USAGE_EVENT, 2.0)

    result = await stream(client, scripted)

    assert result.status_class is StatusClass.SUCCESS, result.error
    assert (result.tokens_in, result.tokens_out) == (12, 3)
    assert result.latency_ms < 1500.0  # not the 2 s the server held on


async def test_a_stall_after_the_finish_reason_keeps_the_answer(
    client: httpx.AsyncClient, scripted: ScriptedServer
) -> None:
    script(scripted, ROLE, piece("Paris."), piece(finish_reason="stop"), 2.0, USAGE_EVENT)

    result = await stream(client, scripted, stream_idle_timeout_ms=200)

    assert result.status_class is StatusClass.SUCCESS, result.error
    assert result.completion is not None
    assert result.completion["choices"][0]["message"]["content"] == "Paris."
    assert result.latency_ms < 1500.0


# --------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"ttft_timeout_ms": 0}, "ttft_timeout_ms"),
        ({"stream_idle_timeout_ms": 0}, "stream_idle_timeout_ms"),
        ({"ttft_timeout_ms": 40_000}, "ttft_timeout_ms must not exceed timeout_ms"),
    ],
)
def test_time_limits_are_validated(fields: dict[str, int], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        limited("http://127.0.0.1:1/v1", **fields)


def test_time_limit_defaults() -> None:
    config = provider("http://127.0.0.1:1/v1")
    assert (config.ttft_timeout_ms, config.stream_idle_timeout_ms) == (None, 10_000)
    assert (config.ttft_timeout_s, config.stream_idle_timeout_s) == (None, 10.0)
    off = limited("http://127.0.0.1:1/v1", stream_idle_timeout_ms=None)
    assert off.stream_idle_timeout_s is None
