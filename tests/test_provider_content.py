"""A provider 2xx is a success only when it answers something.

``message: {}``, ``content: null`` without tool calls, no choices, or a stream
that never carried content are ``bad_response``; whatever shape a provider's body
takes, the call classifies it and never raises. No network: httpx's mock transport.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from app.config.providers import ModelSpec, ProviderConfig
from app.contract import ChatMessage, ChatRequest, StatusClass
from app.execution.call import call_provider
from app.execution.stream import stream_provider

REQUEST = ChatRequest(request_id="c1", messages=[ChatMessage(role="user", content="hi")])


def provider(stream: bool = False) -> ProviderConfig:
    return ProviderConfig(
        id="openai-x",
        base_url="http://provider.test/v1",
        stream=stream,
        models=[ModelSpec(name="m")],
    )


def client_answering(body: bytes, content_type: str = "application/json") -> httpx.AsyncClient:
    def handle(_: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body, headers={"Content-Type": content_type})

    return httpx.AsyncClient(transport=httpx.MockTransport(handle))


def completion_with(message: object, finish_reason: str = "stop") -> bytes:
    return json.dumps({"choices": [{"message": message, "finish_reason": finish_reason}]}).encode()


async def call(body: bytes) -> Any:
    async with client_answering(body) as client:
        return await call_provider(client, provider(), "m", REQUEST, 2.0)


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (completion_with({}), "no content in choices[0].message"),
        (completion_with({"role": "assistant"}), "no content in choices[0].message"),
        (
            completion_with({"role": "assistant", "content": None}),
            "no content in choices[0].message",
        ),
        (completion_with({"content": None, "tool_calls": []}), "no content in choices[0].message"),
        (completion_with({"content": []}), "no content in choices[0].message"),
        (b'{"choices": []}', "missing choices"),
        (b'{"object": "chat.completion"}', "missing choices"),
        (b'{"choices": "abc"}', "missing choices"),
        (b'{"choices": [{"message": {"content": "x"}}], "n": ' + b"1" * 5000 + b"}", None),
        (b"[" * 10_000 + b"]" * 10_000, "malformed JSON body"),
    ],
)
async def test_a_2xx_without_an_answer_is_a_bad_response(body: bytes, error: str | None) -> None:
    result = await call(body)
    assert result.status_class is StatusClass.BAD_RESPONSE
    assert result.completion is None
    assert result.error == (error or "malformed JSON body")


@pytest.mark.parametrize(
    "message",
    [
        {"role": "assistant", "content": "Paris."},
        {"role": "assistant", "content": ""},  # the model's own (empty) answer
        {"role": "assistant", "content": [{"type": "text", "text": "Paris."}]},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "t", "type": "function"}]},
        {"role": "assistant", "content": None, "function_call": {"name": "f"}},
        {"role": "assistant", "content": None, "refusal": "I can't help with that."},
    ],
)
async def test_an_answer_in_any_form_is_a_success(message: dict[str, Any]) -> None:
    result = await call(completion_with(message))
    assert result.status_class is StatusClass.SUCCESS, result.error
    assert result.completion is not None


def sse(*chunks: object) -> bytes:
    lines = [f"data: {c if isinstance(c, str) else json.dumps(c)}\n\n" for c in chunks]
    return ("".join(lines) + "data: [DONE]\n\n").encode()


def chunk(delta: object = None, finish_reason: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"id": "s", "choices": [{"delta": delta, "finish_reason": finish_reason}], **extra}


async def stream(body: bytes) -> Any:
    async with client_answering(body, "text/event-stream") as client:
        return await stream_provider(client, provider(stream=True), "m", REQUEST, 2.0)


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (sse(chunk({"role": "assistant"}), chunk({}, "stop")), "stream carried no content"),
        (sse(chunk(None, "stop")), "stream carried no content"),
        (sse(chunk({"content": None}, "stop")), "stream carried no content"),
        (sse('{"choices": [{"delta": {"content": "x"}, "n": ' + "1" * 5000 + "}]}"), None),
        (sse("[" * 10_000 + "]" * 10_000), None),
    ],
)
async def test_a_stream_without_an_answer_is_a_bad_response(body: bytes, error: str | None) -> None:
    result = await stream(body)
    assert result.status_class is StatusClass.BAD_RESPONSE
    assert result.completion is None
    assert result.error == (error or "malformed stream chunk")


ODD_CHUNKS: list[Callable[[], object]] = [
    lambda: {"choices": "abc"},
    lambda: {"choices": [1, None, "x"]},
    lambda: {"choices": [{"delta": "text"}]},
    lambda: {"usage": {"prompt_tokens": "many", "completion_tokens": -3}},
]


@pytest.mark.parametrize("odd", ODD_CHUNKS)
async def test_odd_chunks_do_not_break_the_call(odd: Callable[[], object]) -> None:
    result = await stream(sse(odd(), chunk({"content": "Paris."}), chunk({}, "stop")))
    assert result.status_class is StatusClass.SUCCESS, result.error
    assert result.completion["choices"][0]["message"]["content"] == "Paris."
    assert result.tokens_in >= 0 and result.tokens_out >= 0


async def test_an_empty_streamed_answer_counts_like_an_empty_content() -> None:
    result = await stream(sse(chunk({"role": "assistant", "content": ""}), chunk({}, "stop")))
    assert result.status_class is StatusClass.SUCCESS
