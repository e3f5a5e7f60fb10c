"""The APIs ``switchyard bench gateway`` calls each side with, one client per API, each with
its official SDK: chat completions and the Responses API (``openai.AsyncOpenAI``), the
Anthropic Messages API (``anthropic.AsyncAnthropic``).

Every client asks the same thing (:data:`PROMPT`, at most :data:`MAX_TOKENS` tokens), times
a stream to its first text delta, and never retries (``max_retries=0``). The mock behind
every side serves chat completions only, so the gateways translate the other two.
"""

from __future__ import annotations

import argparse
import time
from typing import Any, Protocol

from bench.gateway_sides import Side

PROMPT = "Say hello."
#: The prompt as chat messages.
MESSAGES = [{"role": "user", "content": PROMPT}]
MAX_TOKENS = 16
#: The APIs, in the order they are measured and reported.
APIS = ("chat", "responses", "messages")
#: What each API is, for the report.
PATHS = {
    "chat": "POST /v1/chat/completions",
    "responses": "POST /v1/responses",
    "messages": "POST /v1/messages",
}


class ApiClient(Protocol):
    """One side's calls through one API: an answer, and a stream whose time to first
    token (ms) is appended to ``ttft_ms``."""

    side: Side
    ttft_ms: list[float]

    async def call(self) -> None: ...

    async def stream(self) -> None: ...

    async def close(self) -> None: ...


def parse_apis(text: str) -> tuple[str, ...]:
    """``--apis``: names from :data:`APIS`, comma-separated, measured in :data:`APIS` order."""
    asked = {name.strip() for name in text.split(",") if name.strip()}
    unknown = sorted(asked - set(APIS))
    if unknown or not asked:
        raise argparse.ArgumentTypeError(f"takes some of {','.join(APIS)}, comma-separated")
    return tuple(name for name in APIS if name in asked)


def client_for(api: str, side: Side) -> ApiClient:
    if api == "chat":
        return ChatClient(side)
    if api == "responses":
        return ResponsesClient(side)
    if api == "messages":
        return MessagesClient(side)
    raise ValueError(f"unknown API {api!r}")


class _Timed:
    def __init__(self, side: Side) -> None:
        self.side = side
        self.ttft_ms: list[float] = []

    def _keep(self, started: float, first: float | None) -> None:
        """Keep a stream's time to first token (``first``: ``perf_counter()`` at its first
        text delta)."""
        if first is None:
            raise RuntimeError("a stream without content")
        self.ttft_ms.append((first - started) * 1000.0)


class ChatClient(_Timed):
    """``POST /v1/chat/completions`` through ``openai.AsyncOpenAI``."""

    def __init__(self, side: Side) -> None:
        import openai

        super().__init__(side)
        self.sdk = openai.AsyncOpenAI(base_url=side.base_url, api_key=side.api_key, max_retries=0)

    async def call(self) -> None:
        await self.sdk.chat.completions.create(**self._asked())

    async def stream(self) -> None:
        started = time.perf_counter()
        first: float | None = None
        stream = await self.sdk.chat.completions.create(
            **self._asked(), stream=True, stream_options={"include_usage": True}
        )
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                first = first or time.perf_counter()
        self._keep(started, first)

    def _asked(self) -> dict[str, Any]:
        return {"model": self.side.model, "messages": MESSAGES, "max_tokens": MAX_TOKENS}

    async def close(self) -> None:
        await self.sdk.close()


class ResponsesClient(_Timed):
    """``POST /v1/responses`` through ``openai.AsyncOpenAI`` (``client.responses.create``)."""

    def __init__(self, side: Side) -> None:
        import openai

        super().__init__(side)
        self.sdk = openai.AsyncOpenAI(base_url=side.base_url, api_key=side.api_key, max_retries=0)

    async def call(self) -> None:
        await self.sdk.responses.create(
            model=self.side.model, input=PROMPT, max_output_tokens=MAX_TOKENS
        )

    async def stream(self) -> None:
        started = time.perf_counter()
        first: float | None = None
        stream = await self.sdk.responses.create(
            model=self.side.model, input=PROMPT, max_output_tokens=MAX_TOKENS, stream=True
        )
        async for event in stream:
            if event.type == "response.output_text.delta" and event.delta:
                first = first or time.perf_counter()
        self._keep(started, first)

    async def close(self) -> None:
        await self.sdk.close()


class MessagesClient(_Timed):
    """``POST /v1/messages`` through ``anthropic.AsyncAnthropic`` (the key as ``x-api-key``)."""

    def __init__(self, side: Side) -> None:
        import anthropic

        super().__init__(side)
        self.sdk = anthropic.AsyncAnthropic(
            base_url=side.base_url.removesuffix("/v1"), api_key=side.api_key, max_retries=0
        )

    async def call(self) -> None:
        await self.sdk.messages.create(
            model=self.side.model,
            max_tokens=MAX_TOKENS,
            messages=[{"role": "user", "content": PROMPT}],
        )

    async def stream(self) -> None:
        started = time.perf_counter()
        first: float | None = None
        stream = await self.sdk.messages.create(
            model=self.side.model,
            max_tokens=MAX_TOKENS,
            messages=[{"role": "user", "content": PROMPT}],
            stream=True,
        )
        async for event in stream:
            if (
                event.type == "content_block_delta"
                and event.delta.type == "text_delta"
                and event.delta.text
            ):
                first = first or time.perf_counter()
        self._keep(started, first)

    async def close(self) -> None:
        await self.sdk.close()
