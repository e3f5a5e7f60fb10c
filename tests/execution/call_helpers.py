"""Helpers of the executor's provider-call tests (tests/execution/): the scripted
server, a provider, a request, a dispatch and a completion body."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import web
from pydantic import SecretStr

from app.config.schema import ModelSpec, ProviderConfig
from app.contract import (
    ChatMessage,
    ChatRequest,
    Decision,
    Dispatch,
    LogPosition,
    RequestAccepted,
    derived_id,
)

KEY = "fake-test-9f3c1d7e-SECRET"
MODEL = "gpt-4o-mini"
NOW = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


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
