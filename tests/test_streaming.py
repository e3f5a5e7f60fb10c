"""Streaming calls against a real llmock server: a cut stream is never a success."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from factories import accepted, fold, policy
from factories import provider as make_provider
from llmock.scenarios import StreamFault
from llmock.testing import LLMockServer

from app.config.providers import ProviderConfig
from app.contract import ChatMessage, ChatRequest, StatusClass
from app.execution.call import CallResult
from app.execution.http import make_client
from app.execution.outcome import is_final
from app.execution.stream import stream_provider

REQUEST = ChatRequest(
    request_id="s1", messages=[ChatMessage(role="user", content="Tell me a long story")]
)


@pytest.fixture(scope="module")
def server() -> Iterator[LLMockServer]:
    with LLMockServer() as running:
        yield running


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with make_client() as shared:
        yield shared


def provider(server: LLMockServer) -> ProviderConfig:
    return ProviderConfig(
        id="openai-mock",
        base_url=server.base_url("openai"),
        api_key="fake-stream-test-key-0000000000",
        stream=True,
        models=[{"name": "gpt-4o-mini"}],  # type: ignore[list-item]
    )


async def test_a_complete_stream_is_assembled_with_time_to_first_token(
    server: LLMockServer, client: httpx.AsyncClient
) -> None:
    server.state.scenarios.clear()
    result = await stream_provider(client, provider(server), "gpt-4o-mini", REQUEST, 5.0)
    assert result.status_class is StatusClass.SUCCESS, result.error
    assert result.finish_reason == "stop"
    assert result.first_token_ms is not None and 0 < result.first_token_ms <= result.latency_ms
    assert result.completion is not None
    message = result.completion["choices"][0]["message"]
    assert message["role"] == "assistant" and message["content"]


@pytest.mark.parametrize("kind", ["truncate", "disconnect", "malformed"])
async def test_a_broken_stream_is_a_retriable_failure(
    server: LLMockServer, client: httpx.AsyncClient, kind: str
) -> None:
    server.state.scenarios.clear()
    server.state.scenarios.add(StreamFault(kind, after_chunks=2))  # type: ignore[arg-type]
    result = await stream_provider(client, provider(server), "gpt-4o-mini", REQUEST, 5.0)
    assert result.status_class in {StatusClass.BAD_RESPONSE, StatusClass.CONNECTION_ERROR}
    assert result.completion is None
    assert result.error and "fake-stream" not in result.error
    server.state.scenarios.clear()


async def test_a_stalled_stream_times_out(server: LLMockServer, client: httpx.AsyncClient) -> None:
    server.state.scenarios.clear()
    server.state.scenarios.add(StreamFault("stall", after_chunks=1, stall_seconds=3.0))
    result = await stream_provider(client, provider(server), "gpt-4o-mini", REQUEST, 0.5)
    assert result.status_class is StatusClass.TIMEOUT
    server.state.scenarios.clear()


def test_a_cut_stream_is_retried_elsewhere() -> None:
    pol = policy(make_provider("a"), make_provider("b"))
    (dispatch,) = fold([accepted("r1")], pol).dispatches
    cut = CallResult(
        StatusClass.BAD_RESPONSE, None, 12.0, error="stream ended without a finish reason"
    )
    assert is_final(dispatch, cut) is False
