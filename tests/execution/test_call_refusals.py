"""Refusals a provider explains, plain and streamed: a prompt beyond the context window
(tried on another deployment), content a policy rejected (final), and a 429's
Retry-After or none. Each is a ``client_error`` (neutral for the breaker) whose error
names the refusal first and the provider's short code after, never its message.
Fixtures: conftest.py."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from call_helpers import (
    KEY,
    MODEL,
    NOW,
    ScriptedServer,
    chat,
    completion,
    dispatch,
    provider,
    script,
)

from app.contract import (
    CONTENT_POLICY_VIOLATION,
    CONTEXT_LENGTH_EXCEEDED,
    StatusClass,
    refusal_code,
)
from app.execution.call import CallResult, call_provider
from app.execution.outcome import finish, is_final, retriable
from app.execution.stream import stream_provider
from app.routing.reliability import ACCOUNTING, Availability

SECRET_WORDS = "Your prompt mentions the secret plan"  # provider text: never quoted


async def call(client: httpx.AsyncClient, server: ScriptedServer, streamed: bool) -> CallResult:
    config = provider(server.base_url)
    if streamed:
        config = config.model_copy(update={"stream": True})
        return await stream_provider(client, config, MODEL, chat(), 2.0)
    return await call_provider(client, config, MODEL, chat(), 2.0)


def refused(status: int, body: object, server: ScriptedServer) -> None:
    server.reply_json(body, status=status)


# --------------------------------------------------------------------------- context length


CONTEXT_BODIES: list[tuple[str, dict[str, Any], str]] = [
    (
        "openai",
        {
            "error": {
                "message": "This model's maximum context length is 128000 tokens. " + SECRET_WORDS,
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }
        },
        "context_length_exceeded: HTTP 400 (context_length_exceeded)",
    ),
    (
        "anthropic",
        {
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": "prompt is too long: 210000 tokens > 200000 maximum",
            },
        },
        "context_length_exceeded: HTTP 400 (invalid_request_error)",
    ),
    (
        "vllm",
        {
            "object": "error",
            "message": "This model's maximum context length is 4096 tokens. However, you "
            "requested 5000 tokens.",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        },
        "context_length_exceeded: HTTP 400",
    ),
    (
        "llama.cpp",
        {
            "error": {
                "code": 400,
                "message": "request (4476 tokens) exceeds the available context size "
                "(4096 tokens), try increasing it",
                "type": "exceed_context_size_error",
            }
        },
        "context_length_exceeded: HTTP 400 (exceed_context_size_error)",
    ),
]


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize(
    ("shape", "body", "error"), CONTEXT_BODIES, ids=[shape for shape, _, _ in CONTEXT_BODIES]
)
async def test_a_prompt_beyond_the_context_window_is_context_length_exceeded(
    client: httpx.AsyncClient,
    scripted: ScriptedServer,
    streamed: bool,
    shape: str,
    body: dict[str, Any],
    error: str,
) -> None:
    refused(400, body, scripted)

    result = await call(client, scripted, streamed)

    assert result.status_class is StatusClass.CLIENT_ERROR, shape
    assert result.http_status == 400
    assert result.error == error
    assert refusal_code(result.error) == CONTEXT_LENGTH_EXCEEDED
    assert result.retry_after_s is None and result.completion is None


async def test_context_length_exceeded_goes_to_another_deployment(
    client: httpx.AsyncClient, scripted: ScriptedServer
) -> None:
    refused(400, CONTEXT_BODIES[0][1], scripted)
    result = await call(client, scripted, streamed=False)

    assert retriable(result)  # elsewhere: a tried deployment is never picked again
    assert ACCOUNTING[result.status_class].availability is Availability.NEUTRAL
    first = dispatch(attempt=1, max_attempts=3)
    outcome, feedback = finish(first, result, provider(scripted.base_url), occurred_at=NOW)
    assert outcome.retriable and not outcome.final
    assert feedback.retry == first.accepted and feedback.tried == [first.decision.deployment]
    assert outcome.error is not None and SECRET_WORDS not in outcome.error
    assert is_final(dispatch(attempt=3, max_attempts=3), result)


async def test_another_400_is_still_a_plain_client_error(
    client: httpx.AsyncClient, scripted: ScriptedServer
) -> None:
    refused(400, {"error": {"message": "bad temperature", "code": "invalid_value"}}, scripted)

    result = await call(client, scripted, streamed=False)

    assert result.error == "HTTP 400 (invalid_value)" and refusal_code(result.error) is None
    assert not retriable(result) and is_final(dispatch(attempt=1, max_attempts=3), result)


# --------------------------------------------------------------------------- content policy


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("code", ["content_policy_violation", "content_filter"])
async def test_a_400_content_policy_refusal_is_final_with_its_code(
    client: httpx.AsyncClient, scripted: ScriptedServer, streamed: bool, code: str
) -> None:
    body = {"error": {"message": SECRET_WORDS, "type": "invalid_request_error", "code": code}}
    refused(400, body, scripted)

    result = await call(client, scripted, streamed)

    assert result.status_class is StatusClass.CLIENT_ERROR
    assert result.http_status == 400
    assert result.error == f"content_policy_violation: HTTP 400 ({code})"
    assert refusal_code(result.error) == CONTENT_POLICY_VIOLATION
    assert not retriable(result)
    assert is_final(dispatch(attempt=1, max_attempts=3), result)


async def test_a_2xx_cut_by_a_content_filter_is_a_final_refusal(
    client: httpx.AsyncClient, scripted: ScriptedServer
) -> None:
    body = completion("content_filter", prompt_tokens=9, completion_tokens=2)
    scripted.reply_json(body)

    result = await call(client, scripted, streamed=False)

    assert result.status_class is StatusClass.CLIENT_ERROR
    assert result.http_status == 200
    assert result.error == "content_policy_violation: finish_reason content_filter"
    assert result.finish_reason == "content_filter"
    assert result.completion is None  # the partial answer is not delivered
    assert (result.tokens_in, result.tokens_out) == (9, 2)  # but it was paid for
    assert not retriable(result) and is_final(dispatch(attempt=1, max_attempts=3), result)
    assert ACCOUNTING[result.status_class].availability is Availability.NEUTRAL


async def test_a_stream_cut_by_a_content_filter_is_a_final_refusal(
    client: httpx.AsyncClient, scripted: ScriptedServer
) -> None:
    script(
        scripted,
        b'data: {"choices": [{"index": 0, "delta": {"content": "Once"}}]}\n\n',
        b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "content_filter"}]}\n\n',
        b'data: {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 1}}\n\n',
        b"data: [DONE]\n\n",
    )

    result = await call(client, scripted, streamed=True)

    assert result.status_class is StatusClass.CLIENT_ERROR
    assert result.http_status == 200
    assert result.error == "content_policy_violation: finish_reason content_filter"
    assert result.completion is None and (result.tokens_in, result.tokens_out) == (9, 1)
    assert not retriable(result)


async def test_a_content_policy_error_event_in_a_stream_is_a_refusal(
    client: httpx.AsyncClient, scripted: ScriptedServer
) -> None:
    script(scripted, b'data: {"error": {"code": "content_filter", "message": "no"}}\n\n')

    result = await call(client, scripted, streamed=True)

    assert result.status_class is StatusClass.CLIENT_ERROR
    assert result.error == "content_policy_violation: error event in stream"


# --------------------------------------------------------------------------- 429


async def test_a_429_without_retry_after_carries_none(
    client: httpx.AsyncClient, scripted: ScriptedServer
) -> None:
    scripted.reply_json({"error": {"code": "rate_limit_exceeded", "message": KEY}}, status=429)

    result = await call(client, scripted, streamed=False)

    assert result.status_class is StatusClass.RATE_LIMITED
    assert result.retry_after_s is None  # the router backs off on its own
    assert result.error == "HTTP 429 (rate_limit_exceeded)"
    assert retriable(result)
