"""Helpers of the executor's provider-call tests (tests/execution/): the scripted
server, a provider, a request, a dispatch and a completion body."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import web
from factories import accepted_request, decision_for, dispatch_for
from pydantic import SecretStr

from app.config.providers import ModelSpec, ProviderConfig
from app.contract import ChatMessage, ChatRequest, Dispatch

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
    accepted = accepted_request(chat(), NOW, prompt_chars=42, offset=7)
    deployment = f"openai-test:{MODEL}"
    decision = decision_for(
        "req-1", deployment, NOW, attempt=attempt, state_version=7, prompt_chars=42
    )
    deadline = NOW.timestamp() + 60.0
    return dispatch_for(
        accepted, decision, NOW, timeout_s=2.0, max_attempts=max_attempts, deadline=deadline
    )


async def hold(request: web.Request, seconds: float) -> None:
    """Wait up to ``seconds``, less if the client hangs up first."""
    for _ in range(round(seconds / 0.02)):
        if request.transport is None or request.transport.is_closing():
            return
        await asyncio.sleep(0.02)


def script(
    server: ScriptedServer,
    *steps: bytes | float,
    close: bool = False,
    content_type: str = "text/event-stream",
) -> None:
    """A body (an event stream unless ``content_type`` says otherwise) written in steps:
    bytes are written, numbers are pauses (seconds); ``close`` drops the connection at the
    end instead of ending the body."""

    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": content_type})
        await response.prepare(request)
        try:
            for step in steps:
                if isinstance(step, bytes):
                    await response.write(step)
                else:
                    await hold(request, step)
            if close and request.transport is not None:
                request.transport.close()
                return response
            await response.write_eof()
        except ConnectionError:
            pass  # the client gave up, as it should
        return response

    server.handler = handler


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
