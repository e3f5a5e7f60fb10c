"""Mid-stream failover in the executor: a call that goes on with the text a broken
stream gave the client, by prefill or by a restart whose repeated text is held back,
against the fault-injecting provider over HTTP (no broker)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from factories import T0, accepted, outcome

from app.config.providers import ModelSpec, ProviderConfig
from app.contract import ChatMessage, ChatRequest, Decision, Dispatch, StatusClass, StreamDelta
from app.execution.continuation import forget_learnt, stream_on
from app.execution.deltas import DeltaPublisher
from app.execution.outcome import CallResult, feedback
from app.execution.stream import stream_provider
from bench.fault_answer import BREAK_AT, canonical_text, canonical_tokens
from bench.fault_provider import FaultOptions, FaultProvider, start

MESSAGES = [{"role": "user", "content": "tell me the canonical answer"}]
REQUEST = ChatRequest(
    request_id="f-1", messages=[ChatMessage(role="user", content=MESSAGES[0]["content"])]
)
WHOLE = canonical_text(MESSAGES)
SENT = "".join(canonical_tokens(MESSAGES)[:BREAK_AT])  # what a cut stream gave the client


@pytest.fixture
async def base_url() -> AsyncIterator[str]:
    forget_learnt()
    runner, port = await start(FaultProvider(FaultOptions(token_s=0.0)))
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()
    forget_learnt()


def _provider(base_url: str, scenario: str, prefill: bool) -> ProviderConfig:
    return ProviderConfig(
        id=scenario.replace("_", "-"),
        base_url=f"{base_url}/{scenario}/v1",
        models=[ModelSpec(name=scenario)],
        prefill=prefill,
    )


def _dispatch(deployment: str) -> Dispatch:
    event = accepted("f-1", T0).model_copy(update={"request": REQUEST})
    provider, _, model = deployment.partition(":")
    decision = Decision.model_construct(
        request_id="f-1", attempt=2, deployment=deployment, provider=provider, model=model
    )
    return Dispatch.model_construct(decision=decision, accepted=event)


class Sent:
    def __init__(self) -> None:
        self.deltas: list[StreamDelta] = []

    async def __call__(self, delta: StreamDelta) -> Any:
        self.deltas.append(delta)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    def text(self) -> str:
        return "".join(d.content for d in self.deltas)


async def _go_on(base_url: str, scenario: str, prefill: bool) -> tuple[CallResult, Sent]:
    provider = _provider(base_url, scenario, prefill)
    deployment = f"{provider.id}:{scenario}"
    sent = Sent()
    sink = DeltaPublisher(_dispatch(deployment), sent, interval_s=0.01)
    async with httpx.AsyncClient() as client:

        async def call(asked: ChatRequest, within_s: float) -> CallResult:
            return await stream_provider(client, provider, scenario, asked, within_s, sink)

        result = await stream_on(call, provider, deployment, REQUEST, SENT, 10.0, sink)
    await sink.finish("ok" if result.status_class is StatusClass.SUCCESS else "failed")
    return result, sent


def _content(result: CallResult) -> str:
    assert result.completion is not None
    return str(result.completion["choices"][0]["message"]["content"])


@pytest.mark.parametrize(
    ("scenario", "prefill"),
    [("ok", True), ("ok", False), ("rejects_prefill", True), ("rejects_prefill", False)],
)
async def test_the_answer_goes_on_where_the_client_s_text_ends(
    base_url: str, scenario: str, prefill: bool
) -> None:
    """A prefill continued; a prefill refused (400), restarted at once in the same call;
    a restart: the client is sent exactly the rest, the answer recorded is whole."""
    result, sent = await _go_on(base_url, scenario, prefill)
    assert result.status_class is StatusClass.SUCCESS
    assert _content(result) == WHOLE
    assert SENT + sent.text() == WHOLE  # no repeated and no missing text
    assert {d.offset for d in sent.deltas} == {len(SENT)}
    assert sent.deltas[-1].end == "ok"


async def test_a_deployment_that_refused_a_prefill_is_not_sent_one_again(base_url: str) -> None:
    await _go_on(base_url, "rejects_prefill", True)
    before = await _calls(base_url)
    await _go_on(base_url, "rejects_prefill", True)
    assert await _calls(base_url) == before + 1  # a restart at once: no 400 first


async def _calls(base_url: str) -> int:
    async with httpx.AsyncClient() as client:
        report = (await client.get(f"{base_url}/_faults/calls")).json()
    return sum(int(row["calls"]) for row in report["calls"])


async def test_a_restart_that_differs_publishes_nothing_more() -> None:
    sent = Sent()
    sink = DeltaPublisher(_dispatch("p:m"), sent, interval_s=0.01)
    sink.restart_after("Hello wor")
    sink.piece("Hello ", None, None)
    sink.piece("there, friend", None, None)
    await sink.finish("ok")
    assert sent.deltas == [] and sink.diverged


async def test_a_broken_stream_s_retry_carries_the_text_the_client_has() -> None:
    dispatch = _dispatch("p:m").model_copy(update={"tried": []})
    broken = CallResult(StatusClass.BAD_RESPONSE, None, 5.0, error="stream broken", partial="Hel")
    failed = outcome("f-1", "p:m", T0 + 1, attempt=2, status=broken.status_class, final=False)
    first = feedback(dispatch, failed, broken)
    assert first.retry is not None and first.retry.answered_prefix == "Hel"
    again = dispatch.model_copy(update={"accepted": first.retry})
    more = CallResult(StatusClass.BAD_RESPONSE, None, 5.0, error="stream broken", partial="lo")
    second = feedback(again, failed, more)
    assert second.retry is not None and second.retry.answered_prefix == "Hello"
